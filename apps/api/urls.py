from django.urls import path

from apps.accounts.apis import TokenApi
from apps.ledger.apis import AssetListApi, BalanceListApi, PostingListApi

urlpatterns = [
    path("auth/token/", TokenApi.as_view(), name="api-token"),
    path("assets/", AssetListApi.as_view(), name="api-assets"),
    path("balances/", BalanceListApi.as_view(), name="api-balances"),
    path("ledger/entries/", PostingListApi.as_view(), name="api-ledger-entries"),
]
