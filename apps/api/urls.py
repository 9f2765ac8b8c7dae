"""The route table of API.md under ``/api/v1/``: one view per path, methods as API.md lists them.

Path parameters are matched as any text and judged by the views, and the last route catches
every other path under the prefix, so that an id, a name or a path that cannot exist is a 404
in the API's error shape rather than Django's HTML page.
"""

from django.urls import path, re_path

from apps.accounts.apis import TokenApi
from apps.api.views import api_not_found
from apps.ledger.apis import AssetListApi, BalanceListApi, PostingListApi
from apps.orders.apis import (
    FillListApi,
    MarketDepthApi,
    MarketListApi,
    MarketTradeListApi,
    OrderDetailApi,
    OrderListApi,
)
from apps.streams.apis import StreamTokenApi
from apps.wallets.apis import DepositAddressApi, DepositListApi, WithdrawalDetailApi, WithdrawalListApi

urlpatterns = [
    path("auth/token/", TokenApi.as_view(), name="api-token"),
    path("assets/", AssetListApi.as_view(), name="api-assets"),
    path("markets/", MarketListApi.as_view(), name="api-markets"),
    path("markets/<str:symbol>/depth/", MarketDepthApi.as_view(), name="api-market-depth"),
    path("markets/<str:symbol>/trades/", MarketTradeListApi.as_view(), name="api-market-trades"),
    path("balances/", BalanceListApi.as_view(), name="api-balances"),
    path("orders/", OrderListApi.as_view(), name="api-orders"),
    path("orders/<str:id>/", OrderDetailApi.as_view(), name="api-order"),
    path("trades/", FillListApi.as_view(), name="api-trades"),
    path("deposit-address/<str:asset>/", DepositAddressApi.as_view(), name="api-deposit-address"),
    path("deposits/", DepositListApi.as_view(), name="api-deposits"),
    path("withdrawals/", WithdrawalListApi.as_view(), name="api-withdrawals"),
    path("withdrawals/<str:id>/", WithdrawalDetailApi.as_view(), name="api-withdrawal"),
    path("ledger/entries/", PostingListApi.as_view(), name="api-ledger-entries"),
    path("stream-token/", StreamTokenApi.as_view(), name="api-stream-token"),
    re_path(r"", api_not_found),  # last: not a DRF view, so not in the schema
]
