"""REST API of the ledger (API.md): assets, balances, the user's postings."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from apps.api.base import ScopedApiView, text_param
from apps.api.fields import AmountOut, ApiTime
from apps.api.pagination import LIST_PARAMS, id_page, page_params, page_response
from apps.api.schema import LIST_PARAMETERS, list_of
from apps.core.errors import NotFound
from apps.ledger.models import AccountKind, Asset, Posting
from apps.ledger.selectors import balances_for_user, user_postings


class AssetOut(serializers.Serializer):
    """An asset: its precision (decimals) and withdrawal terms, amounts at that precision."""

    code = serializers.CharField()
    name = serializers.CharField()
    decimals = serializers.IntegerField()
    withdrawal_fee = AmountOut(decimals="decimals")
    min_withdrawal = AmountOut(decimals="decimals")


class BalanceOut(serializers.Serializer):
    """The user's funds in one asset."""

    asset = serializers.CharField()
    available = AmountOut(decimals="decimals", help_text="What the user can spend or withdraw now.")
    held = AmountOut(
        decimals="decimals",
        help_text="On hold: held for the user's open orders and pending withdrawals (the web UI's On hold).",
    )
    total = AmountOut(decimals="decimals", help_text="available + held.")


class _AccountSide(serializers.ChoiceField):
    """A user account's kind as the API names it: ``available`` or ``held``."""

    def to_representation(self, value):
        return "available" if value == AccountKind.USER_AVAILABLE else "held"


class PostingOut(serializers.Serializer):
    """One change of the user's available or held balance, with the entry that made it."""

    entry_id = serializers.IntegerField()
    time = ApiTime(source="entry.created_at")
    asset = serializers.CharField(source="asset.code")
    account = _AccountSide(
        source="account.kind",
        choices=["available", "held"],
        help_text="available, or held (on hold for open orders and pending withdrawals).",
    )
    account_id = serializers.IntegerField(
        help_text="The account's id, as an entry proof's postings name it (docs/PROOFS.md section 1)."
    )
    posting_id = serializers.IntegerField(source="id", help_text="The posting's id, as an entry proof names it.")
    # Postings are signed debit-positive; user accounts are credit-normal, so the balance moves by -amount.
    amount = AmountOut(negate=True, help_text="Signed change of the balance: positive adds, negative takes away.")
    balance_after = AmountOut()
    reason = serializers.CharField(source="entry.reason")
    reference = serializers.SerializerMethodField()

    def get_reference(self, posting: Posting) -> str:
        return f"{posting.entry.reference_type}:{posting.entry.reference_id}".strip(":")


class AssetListApi(ScopedApiView):
    """Every asset with its precision and withdrawal terms; public."""

    permission_classes = [AllowAny]

    @extend_schema(responses=AssetOut(many=True), auth=[])
    def get(self, request):
        return Response(AssetOut(Asset.objects.order_by("code"), many=True).data)


class BalanceListApi(ScopedApiView):
    """The user's available, held (on hold for open orders and pending withdrawals) and total funds per asset."""

    @extend_schema(responses=BalanceOut(many=True))
    def get(self, request):
        return Response(BalanceOut(balances_for_user(request.user.id), many=True).data)


class PostingListApi(ScopedApiView):
    """The user's ledger statement: each posting on their available and held accounts, newest first."""

    query_params = ("asset", *LIST_PARAMS)

    @extend_schema(
        parameters=[OpenApiParameter("asset", str, required=False), *LIST_PARAMETERS],
        operation_id="v1_ledger_entries_list",
        responses=list_of(PostingOut, "Posting"),
    )
    def get(self, request):
        """The user's postings, newest first; ``start``/``end`` bound their entries' time."""
        page = page_params(request, list_name="postings", scope=f"user:{request.user.id}", key=(int,))
        asset = text_param(request, "asset")
        if asset is not None and not Asset.objects.filter(code=asset).exists():  # not an empty list reading "none"
            raise NotFound(f"No asset {asset}.", fields={"asset": "No such asset."})
        postings = user_postings(request.user.id, asset_code=asset)
        return page_response(
            page,
            id_page(postings, page, time_field="entry__created_at"),
            key_of=lambda posting: (posting.id,),
            out=lambda posting: PostingOut(posting).data,
        )
