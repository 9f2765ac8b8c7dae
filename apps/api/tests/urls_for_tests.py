"""A POST endpoint used only by the idempotency tests: a real ledger transfer behind ``idempotent``."""

from decimal import Decimal

from django.urls import include, path
from rest_framework.response import Response

from apps.api.base import ScopedApiView
from apps.api.idempotency import idempotent
from apps.ledger.amounts import money, parse_amount
from apps.ledger.services import transfer_create


class TransferApi(ScopedApiView):
    required_scope = "trade"

    def post(self, request):
        amount = parse_amount(request.data.get("amount"), decimals=6)

        def perform():
            entry = transfer_create(
                source_user_id=request.user.id,
                destination_user_id=int(request.data["to"]),
                amount=money(Decimal(amount), "USDT"),
                transfer_id=request.data["id"],
            )
            return Response({"entry_id": entry.id, "amount": str(amount)}, status=201)

        return idempotent(request, perform)


urlpatterns = [path("api/v1/", include("exchange.api_urls")), path("test/transfer/", TransferApi.as_view())]
