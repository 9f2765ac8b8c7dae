"""The route table of ``/api/v3/`` (Binance's spot REST paths, no trailing slash); the last route catches the rest."""

from django.urls import path, re_path
from django.views.decorators.cache import never_cache

from . import market_data as md
from . import trading, user_stream
from .endpoint import not_found, route, unsupported

# Binance spot REST paths this exchange does not serve: -1020 "not supported", not -1099 "not found".
UNSUPPORTED = (
    "order/cancelReplace",
    "order/oco",
    "order/amend/keepPriority",
    "order/amendments",
    "orderList",
    "orderList/oco",
    "orderList/oto",
    "orderList/otoco",
    "allOrderList",
    "openOrderList",
    "sor/order",
    "sor/order/test",
    "myPreventedMatches",
    "myAllocations",
    "rateLimit/order",
    "ticker/tradingDay",
)

urlpatterns = [
    path("ping", route(GET=md.ping), name="binance-ping"),
    path("time", route(GET=md.server_time), name="binance-time"),
    path("exchangeInfo", route(GET=md.exchange_info), name="binance-exchange-info"),
    path("depth", route(GET=md.depth), name="binance-depth"),
    path("trades", route(GET=md.trades), name="binance-trades"),
    path("historicalTrades", route(GET=md.historical_trades), name="binance-historical-trades"),
    path("aggTrades", route(GET=md.aggregate_trades), name="binance-agg-trades"),
    path("klines", route(GET=md.klines), name="binance-klines"),
    path("uiKlines", route(GET=md.klines), name="binance-ui-klines"),
    path("avgPrice", route(GET=md.avg_price), name="binance-avg-price"),
    path("ticker/24hr", route(GET=md.ticker_24hr), name="binance-ticker-24hr"),
    path("ticker/price", route(GET=md.ticker_price), name="binance-ticker-price"),
    path("ticker/bookTicker", route(GET=md.book_ticker), name="binance-book-ticker"),
    path("ticker", route(GET=md.ticker_window), name="binance-ticker"),
    path(
        "order",
        route(POST=trading.order_new, GET=trading.order_get, DELETE=trading.order_delete),
        name="binance-order",
    ),
    path("order/test", route(POST=trading.order_test), name="binance-order-test"),
    path(
        "openOrders",
        route(GET=trading.open_orders, DELETE=trading.open_orders_delete),
        name="binance-open-orders",
    ),
    path("allOrders", route(GET=trading.all_orders), name="binance-all-orders"),
    path("myTrades", route(GET=trading.my_trades), name="binance-my-trades"),
    path("account", route(GET=trading.account), name="binance-account"),
    path("account/commission", route(GET=trading.account_commission), name="binance-account-commission"),
    path(
        "userDataStream",
        never_cache(  # the listenKey opens the user's stream: Cache-Control: no-store
            route(
                POST=user_stream.listen_key_create,
                PUT=user_stream.listen_key_keepalive,
                DELETE=user_stream.listen_key_close,
            )
        ),
        name="binance-user-data-stream",
    ),
    *(path(name, unsupported) for name in UNSUPPORTED),
    re_path(r"", not_found),
]
