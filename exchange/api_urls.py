"""The route table of API.md under ``/api/v1/``: one view per path, methods as API.md lists them.

Path parameters are matched as any text and judged by the views, and the last route catches
every other path under the prefix, so that an id, a name or a path that cannot exist is a 404
in the API's error shape rather than Django's HTML page.
"""

from django.urls import path, re_path

from apps.api.accounts_apis import TokenApi
from apps.api.ledger_apis import AssetListApi, BalanceListApi, PostingListApi
from apps.api.ledger_proof_apis import EntryProofApi, JournalBlockApi, JournalHeadApi, KeyListApi
from apps.api.second_factor_apis import OtpConfirmApi, OtpEnrolApi
from apps.api.views import api_not_found
from apps.marketdata.apis import CandleListApi, ServerTimeApi, TickerApi, TickerListApi
from apps.orders.apis import (
    FillListApi,
    MarketDepthApi,
    MarketListApi,
    MarketTradeListApi,
    OrderDetailApi,
    OrderListApi,
)
from apps.proofs.apis import LiabilityProofApi, LiabilitySnapshotListApi, LiabilitySnapshotProofApi
from apps.streams.apis import StreamTokenApi
from apps.wallets.apis import (
    DepositAddressApi,
    DepositListApi,
    WithdrawalAddressDetailApi,
    WithdrawalAddressListApi,
    WithdrawalDetailApi,
    WithdrawalListApi,
)

urlpatterns = [
    path("auth/token/", TokenApi.as_view(), name="api-token"),
    path("assets/", AssetListApi.as_view(), name="api-assets"),
    path("markets/", MarketListApi.as_view(), name="api-markets"),
    path("markets/<str:symbol>/depth/", MarketDepthApi.as_view(), name="api-market-depth"),
    path("markets/<str:symbol>/trades/", MarketTradeListApi.as_view(), name="api-market-trades"),
    path("markets/<str:symbol>/candles/", CandleListApi.as_view(), name="api-market-candles"),
    path("markets/<str:symbol>/ticker/", TickerApi.as_view(), name="api-market-ticker"),
    path("tickers/", TickerListApi.as_view(), name="api-tickers"),
    path("time/", ServerTimeApi.as_view(), name="api-time"),
    path("balances/", BalanceListApi.as_view(), name="api-balances"),
    path("orders/", OrderListApi.as_view(), name="api-orders"),
    path("orders/<str:id>/", OrderDetailApi.as_view(), name="api-order"),
    path("trades/", FillListApi.as_view(), name="api-trades"),
    path("deposit-address/<str:asset>/", DepositAddressApi.as_view(), name="api-deposit-address"),
    path("deposits/", DepositListApi.as_view(), name="api-deposits"),
    path("withdrawal-addresses/", WithdrawalAddressListApi.as_view(), name="api-withdrawal-addresses"),
    path("withdrawal-addresses/<str:id>/", WithdrawalAddressDetailApi.as_view(), name="api-withdrawal-address"),
    path("withdrawals/", WithdrawalListApi.as_view(), name="api-withdrawals"),
    path("withdrawals/<str:id>/", WithdrawalDetailApi.as_view(), name="api-withdrawal"),
    path("ledger/entries/", PostingListApi.as_view(), name="api-ledger-entries"),
    path("account/otp/", OtpEnrolApi.as_view(), name="api-account-otp"),
    path("account/otp/confirm/", OtpConfirmApi.as_view(), name="api-account-otp-confirm"),
    path("ledger/entries/<str:id>/proof/", EntryProofApi.as_view(), name="api-ledger-entry-proof"),
    path("proofs/keys/", KeyListApi.as_view(), name="api-proofs-keys"),
    path("proofs/journal/head/", JournalHeadApi.as_view(), name="api-proofs-journal-head"),
    path("proofs/journal/blocks/<str:height>/", JournalBlockApi.as_view(), name="api-proofs-journal-block"),
    path("proofs/liabilities/", LiabilitySnapshotListApi.as_view(), name="api-proofs-liabilities"),
    path("proofs/liabilities/latest/", LiabilityProofApi.as_view(), name="api-proofs-liabilities-latest"),
    path(
        "proofs/liabilities/<str:snapshot_id>/proof/",
        LiabilitySnapshotProofApi.as_view(),
        name="api-proofs-liabilities-snapshot-proof",
    ),
    path("stream-token/", StreamTokenApi.as_view(), name="api-stream-token"),
    re_path(r"", api_not_found),  # last: not a DRF view, so not in the schema
]
