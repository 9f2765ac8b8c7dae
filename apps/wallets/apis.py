"""REST API of the wallets (API.md): deposit addresses, deposits, withdrawals.

Reads need the ``read`` scope; requesting and cancelling withdrawals and changing the
address book need ``withdraw``. Withdrawals go only to ``active`` addresses of the user's
address book; with a browser session they also need a current second-factor code (``otp``),
which an API key with the ``withdraw`` scope stands for. An API key with a withdrawal address
allow-list (``ApiKey.withdrawal_addresses``) may withdraw only to those addresses. Amounts are
plain decimal strings at the asset's precision.
"""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.accounts.models import ApiKey
from apps.accounts.second_factor import second_factor_check_if_enrolled, second_factor_require
from apps.api.base import ScopedApiView, path_id, path_name
from apps.api.fields import AmountInput, AmountOut, ApiTime, BlankAsNull, InputSerializer, Text
from apps.api.idempotency import idempotent
from apps.api.pagination import LIST_PARAMS, id_page, page_params, page_response
from apps.api.schema import IDEMPOTENCY_KEY_PARAMETER, LIST_PARAMETERS, list_of
from apps.core.errors import DomainError, NotFound, PermissionDenied
from apps.ledger.models import Asset

from .address_book import withdrawal_address_add, withdrawal_address_delete
from .custody.base import CustodyError
from .errors import UNKNOWN_ASSET, unknown_asset_message
from .models import DepositStatus, WithdrawalAddressStatus, WithdrawalStatus
from .selectors import deposits_for_user, withdrawal_addresses_for_user, withdrawals_for_user
from .services import deposit_address_get_or_create, withdrawal_cancel, withdrawal_request, withdrawal_request_check


class CustodyUnavailable(DomainError):
    """The custody provider could not hand out a deposit address just now: retry later (HTTP 503)."""

    code = "custody_unavailable"
    status = 503


class DepositAddressOut(serializers.Serializer):
    """The user's deposit address for one asset."""

    asset = serializers.CharField(source="asset.code")
    address = serializers.CharField()


class DepositOut(serializers.Serializer):
    """A deposit: pending until confirmed, then credited."""

    id = serializers.IntegerField()
    asset = serializers.CharField(source="asset.code")
    amount = AmountOut()
    txid = serializers.CharField()
    vout = serializers.IntegerField()
    status = serializers.ChoiceField(choices=DepositStatus.choices)
    confirmations = serializers.IntegerField()
    time = ApiTime(source="created_at", help_text="When the deposit was first seen.")


class WithdrawalIn(InputSerializer):
    asset = Text(max_length=10, help_text="Asset code, such as BTC.")
    amount = AmountInput(help_text="What the address receives; the asset's withdrawal fee is taken on top.")
    address = Text(max_length=128)
    otp = Text(
        max_length=32,
        required=False,
        help_text="A current code from the authenticator app: required with a browser session.",
    )


class WithdrawalOut(serializers.Serializer):
    """A withdrawal: the amount the address receives and the fee taken on top."""

    id = serializers.IntegerField()
    asset = serializers.CharField(source="asset.code")
    amount = AmountOut()
    fee = AmountOut()
    address = serializers.CharField()
    status = serializers.ChoiceField(choices=WithdrawalStatus.choices)
    txid = BlankAsNull()
    reject_reason = BlankAsNull(help_text="Why an operator rejected it (status rejected); null otherwise.")
    created_at = ApiTime()
    updated_at = ApiTime()


def _asset(code: str) -> Asset:
    asset = Asset.objects.filter(code=path_name(code, what="asset")).first()
    if asset is None:
        raise NotFound(unknown_asset_message(code), fields={"asset": UNKNOWN_ASSET})
    return asset


class DepositAddressApi(ScopedApiView):
    """The user's deposit address for the asset, handed out by the custody provider the first time."""

    @extend_schema(
        parameters=[OpenApiParameter("asset", str, OpenApiParameter.PATH, description="Asset code, such as BTC.")],
        responses={200: DepositAddressOut, 503: OpenApiResponse(description="The custody provider did not answer.")},
    )
    def get(self, request, asset: str):
        found = _asset(asset)
        try:
            address = deposit_address_get_or_create(user_id=request.user.id, asset=found)
        except CustodyError:
            raise CustodyUnavailable("The custody provider did not answer; try again shortly.") from None
        return Response(DepositAddressOut(address).data)


class DepositListApi(ScopedApiView):
    """The user's deposits, newest first: pending until confirmed, then credited."""

    query_params = LIST_PARAMS

    @extend_schema(
        operation_id="v1_deposits_list", parameters=LIST_PARAMETERS, responses=list_of(DepositOut, "Deposit")
    )
    def get(self, request):
        """The user's deposits, newest first; ``start``/``end`` bound when they were first seen."""
        page = page_params(request, list_name="deposits", scope=f"user:{request.user.id}", key=(int,))
        return page_response(
            page,
            id_page(deposits_for_user(user_id=request.user.id), page),
            key_of=lambda deposit: (deposit.id,),
            out=lambda deposit: DepositOut(deposit).data,
        )


def _check_allow_list(request, address: str) -> None:
    """An API key with a withdrawal allow-list may withdraw only to the addresses on it."""
    key = request.auth
    if isinstance(key, ApiKey) and key.withdrawal_addresses and address not in key.withdrawal_addresses:
        message = "This API key may not withdraw to this address."
        raise PermissionDenied(message, fields={"address": message})


class WithdrawalListApi(ScopedApiView):
    """``GET``: the user's withdrawals, newest first. ``POST``: request a withdrawal."""

    method_scopes = {"GET": "read", "POST": "withdraw"}
    query_params = LIST_PARAMS

    @extend_schema(
        operation_id="v1_withdrawals_list", parameters=LIST_PARAMETERS, responses=list_of(WithdrawalOut, "Withdrawal")
    )
    def get(self, request):
        """The user's withdrawals, newest first; ``start``/``end`` bound when they were requested."""
        page = page_params(request, list_name="withdrawals", scope=f"user:{request.user.id}", key=(int,))
        return page_response(
            page,
            id_page(withdrawals_for_user(user_id=request.user.id), page),
            key_of=lambda withdrawal: (withdrawal.id,),
            out=lambda withdrawal: WithdrawalOut(withdrawal).data,
        )

    @extend_schema(
        request=WithdrawalIn,
        parameters=[IDEMPOTENCY_KEY_PARAMETER],
        responses={201: WithdrawalOut},
    )
    def post(self, request):
        """Request a withdrawal: ``amount`` plus the asset's fee is held at once. Small amounts are approved
        automatically, larger ones wait for an operator (and, above the asset's threshold, for a confirmation
        by e-mail link first). 400 ``address_not_allowed`` unless the address is ``active`` in the address book;
        with a session (or an ``otp`` sent with an API key), 403 ``second_factor_required`` / 400 ``invalid_otp``;
        403 ``permission_denied`` (field ``address``) when the API key's withdrawal allow-list does not hold the
        address."""
        body = WithdrawalIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        _check_allow_list(request, data["address"])

        def check() -> None:
            # A session needs the second factor (a key's withdraw scope stands for it; a code sent with a key is
            # checked all the same, never ignored), checked outside the transaction so that a wrong code counts
            # against django-otp's throttle; after the checks that need no lock, so a typo does not use the code up.
            withdrawal_request_check(
                user_id=request.user.id, asset_code=data["asset"], amount=data["amount"], address=data["address"]
            )
            if not isinstance(request.auth, ApiKey) or data.get("otp"):
                second_factor_require(user_id=request.user.id, code=data.get("otp"))

        def perform() -> Response:
            withdrawal = withdrawal_request(
                user_id=request.user.id,
                asset_code=data["asset"],
                amount=data["amount"],
                address=data["address"],
            )
            return Response(WithdrawalOut(withdrawal).data, status=201)

        return idempotent(request, perform, check=check)


class WithdrawalDetailApi(ScopedApiView):
    """Cancel one of the user's withdrawals."""

    required_scope = "withdraw"

    @extend_schema(
        parameters=[OpenApiParameter("id", int, OpenApiParameter.PATH, description="The withdrawal's id.")],
        responses={200: OpenApiResponse(WithdrawalOut, "The withdrawal, cancelled; its hold released.")},
    )
    def delete(self, request, id: str):  # noqa: A002 (API.md's name)
        """Cancel while ``requested`` or ``awaiting_approval`` and release its hold; afterwards 409
        ``invalid_state``. Another user's withdrawal is a 404."""
        withdrawal = withdrawal_cancel(withdrawal_id=path_id(id, what="withdrawal"), user_id=request.user.id)
        return Response(WithdrawalOut(withdrawal).data)


class WithdrawalAddressIn(InputSerializer):
    asset = Text(max_length=10, help_text="Asset code, such as BTC.")
    address = Text(max_length=128)
    # A declared field (DRF's metaclass takes it off the class), not Field.label: hence the ignore.
    label = Text(max_length=100, required=False, help_text="Your name for it.")  # type: ignore[assignment]
    otp = Text(max_length=32, required=False, help_text="A current code: required once a second factor is on.")


class _StatusNow(serializers.ChoiceField):
    """An address book entry's status as of the serializer's ``context["now"]``."""

    def to_representation(self, value):  # the whole entry (source="*")
        return value.status_at(self.context["now"])


class WithdrawalAddressOut(serializers.Serializer):
    """An address of the user's withdrawal address book."""

    # The status is the entry's as of context["now"] (one instant for a whole list).

    id = serializers.IntegerField()
    asset = serializers.CharField(source="asset.code")
    address = serializers.CharField()
    label = serializers.CharField()  # type: ignore[assignment]  # a declared field, as in WithdrawalAddressIn
    status = _StatusNow(source="*", choices=WithdrawalAddressStatus.choices)
    usable_from = ApiTime(allow_null=True, help_text="Null until confirmed by e-mail link.")


class WithdrawalAddressListApi(ScopedApiView):
    """``GET``: the user's withdrawal address book. ``POST``: add an address (confirmed by e-mail link)."""

    method_scopes = {"GET": "read", "POST": "withdraw"}
    query_params = LIST_PARAMS

    @extend_schema(
        operation_id="v1_withdrawal_addresses_list",
        parameters=LIST_PARAMETERS,
        responses=list_of(WithdrawalAddressOut, "WithdrawalAddress"),
    )
    def get(self, request):
        """The address book, newest first: ``pending_confirmation``, ``cooling_off`` until ``usable_from``, ``active``;
        ``start``/``end`` bound when the addresses were added."""
        now = timezone.now()
        page = page_params(request, list_name="withdrawal-addresses", scope=f"user:{request.user.id}", key=(int,))
        return page_response(
            page,
            id_page(withdrawal_addresses_for_user(user_id=request.user.id), page),
            key_of=lambda entry: (entry.id,),
            out=lambda entry: WithdrawalAddressOut(entry, context={"now": now}).data,
        )

    @extend_schema(
        request=WithdrawalAddressIn, parameters=[IDEMPOTENCY_KEY_PARAMETER], responses={201: WithdrawalAddressOut}
    )
    def post(self, request):
        """Add an address, ``pending_confirmation``: a confirmation link is e-mailed to the user. 400
        ``invalid_address``, ``invalid_otp`` (with a session, a second factor is on and ``otp`` is wrong), ``invalid_request``
        naming ``address`` when it is in the book already."""
        body = WithdrawalAddressIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data

        def check() -> None:
            # Like a withdrawal: a session needs the code once a second factor is on (a key's withdraw scope
            # stands for it), checked outside the transaction so that a wrong code counts against the throttle.
            if not isinstance(request.auth, ApiKey):
                second_factor_check_if_enrolled(user_id=request.user.id, code=data.get("otp"))

        def perform() -> Response:
            entry = withdrawal_address_add(
                user_id=request.user.id,
                asset_code=data["asset"],
                address=data["address"],
                label=data.get("label", ""),
            )
            return Response(WithdrawalAddressOut(entry, context={"now": timezone.now()}).data, status=201)

        return idempotent(request, perform, check=check)


class WithdrawalAddressDetailApi(ScopedApiView):
    """Delete an address from the user's book."""

    required_scope = "withdraw"

    @extend_schema(
        parameters=[OpenApiParameter("id", int, OpenApiParameter.PATH, description="The entry's id.")],
        responses={204: OpenApiResponse(description="Deleted.")},
    )
    def delete(self, request, id: str):  # noqa: A002 (API.md's name)
        """Delete the entry; withdrawals to it are refused from now on. Another user's entry is a 404."""
        withdrawal_address_delete(user_id=request.user.id, entry_id=path_id(id, what="withdrawal address"))
        return Response(status=204)
