"""REST API of the ledger (API.md): assets, balances, the user's postings."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from apps.api.pagination import LIST_PARAMS, id_page, page_params, page_response
from apps.api.schema import LIST_PARAMETERS, list_of
from apps.api.views import ScopedApiView, api_time, text_param

from .amounts import format_amount
from .models import AccountKind, Asset
from .selectors import balances_for_user, user_postings


class AssetOut(serializers.Serializer):
    code = serializers.CharField()
    name = serializers.CharField()
    decimals = serializers.IntegerField()
    withdrawal_fee = serializers.CharField()
    min_withdrawal = serializers.CharField()


class BalanceOut(serializers.Serializer):
    asset = serializers.CharField()
    available = serializers.CharField(help_text="What the user can spend or withdraw now.")
    held = serializers.CharField(
        help_text="On hold: held for the user's open orders and pending withdrawals (the web UI's On hold)."
    )
    total = serializers.CharField(help_text="available + held.")


class PostingOut(serializers.Serializer):
    entry_id = serializers.IntegerField()
    time = serializers.DateTimeField()
    asset = serializers.CharField()
    account = serializers.ChoiceField(
        choices=["available", "held"],
        help_text="available, or held (on hold for open orders and pending withdrawals).",
    )
    amount = serializers.CharField(help_text="Signed change of the balance: positive adds, negative takes away.")
    balance_after = serializers.CharField()
    reason = serializers.CharField()
    reference = serializers.CharField()


class AssetListApi(ScopedApiView):
    """Every asset with its precision and withdrawal terms; public."""

    permission_classes = [AllowAny]

    @extend_schema(responses=AssetOut(many=True), auth=[])
    def get(self, request):
        return Response(
            [
                {
                    "code": asset.code,
                    "name": asset.name,
                    "decimals": asset.decimals,
                    "withdrawal_fee": format_amount(asset.withdrawal_fee, asset.decimals),
                    "min_withdrawal": format_amount(asset.min_withdrawal, asset.decimals),
                }
                for asset in Asset.objects.order_by("code")
            ]
        )


class BalanceListApi(ScopedApiView):
    """The user's available, held (on hold for open orders and pending withdrawals) and total funds per asset."""

    @extend_schema(responses=BalanceOut(many=True))
    def get(self, request):
        return Response(
            [
                {
                    "asset": balance.asset,
                    "available": format_amount(balance.available, balance.decimals),
                    "held": format_amount(balance.held, balance.decimals),
                    "total": format_amount(balance.total, balance.decimals),
                }
                for balance in balances_for_user(request.user.id)
            ]
        )


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
        postings = user_postings(request.user.id, asset_code=text_param(request, "asset"))
        return page_response(
            page,
            id_page(postings, page, time_field="entry__created_at"),
            key_of=lambda posting: (posting.id,),
            out=lambda posting: {
                "entry_id": posting.entry_id,
                "time": api_time(posting.entry.created_at),
                "asset": posting.asset.code,
                "account": "available" if posting.account.kind == AccountKind.USER_AVAILABLE else "held",
                # Postings are signed debit-positive; user accounts are credit-normal, so the balance moves by -amount.
                "amount": format_amount(-posting.amount, posting.asset.decimals),
                "balance_after": format_amount(posting.balance_after, posting.asset.decimals),
                "reason": posting.entry.reason,
                "reference": f"{posting.entry.reference_type}:{posting.entry.reference_id}".strip(":"),
            },
        )
