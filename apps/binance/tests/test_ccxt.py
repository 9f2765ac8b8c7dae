"""CCXT's own ``binance`` class, unchanged, against a live server: each answer through CCXT's validators.

The validators ship in the ``ccxt`` wheel (``ccxt/test/exchange/base/test_*.py``); each takes the
exchange, a dict of properties to skip, the method's name and the parsed value, and raises on
anything malformed. Only the base URLs are ours; the options keep CCXT off Binance's other
products (``fetchMarkets`` spot only; no ``fetchCurrencies`` or ``fetchMargins``, which are ``sapi`` calls).
"""

import ccxt
import pytest
from ccxt.test.exchange.base.test_balance import test_balance as check_balance
from ccxt.test.exchange.base.test_market import test_market as check_market
from ccxt.test.exchange.base.test_ohlcv import test_ohlcv as check_ohlcv
from ccxt.test.exchange.base.test_order import test_order as check_order
from ccxt.test.exchange.base.test_order_book import test_order_book as check_order_book
from ccxt.test.exchange.base.test_ticker import test_ticker as check_ticker
from ccxt.test.exchange.base.test_trade import test_trade as check_trade

from apps.binance.tests.test_trading import Signer
from apps.orders.models import Command, CommandStatus, Order, OrderStatus
from apps.orders.services.commands import queue_connection_close
from apps.orders.tests.helpers import place

pytestmark = pytest.mark.django_db(transaction=True)

SYMBOL = "BTC/USDT"
SKIP: dict = {}
# Binance's spot depth carries no time (only lastUpdateId), so CCXT's book has none: the one property skipped.
SKIP_BOOK_TIME = {"timestamp": True, "datetime": True}
# The order validator knows open, closed and canceled only; Binance's EXPIRED (an IOC remainder) is "expired"
# in CCXT's own parser, so for that order the status is checked by the test instead.
SKIP_STATUS = {"status": True}


def binance_client(base_url: str, api_key: str = "", secret: str = "") -> ccxt.binance:
    """The configuration of README's "Connect your bot"; every other Binance product's URL points here too,
    so that a call the options failed to keep away is a 404 of ours rather than traffic to Binance."""
    api = f"{base_url}/api/v3"
    elsewhere = {name: f"{base_url}/not-served/{name}" for name in ccxt.binance().urls["api"]}
    return ccxt.binance(
        {
            "urls": {"api": {**elsewhere, "public": api, "private": api}},
            "apiKey": api_key,
            "secret": secret,
            "options": {"fetchMarkets": {"types": ["spot"]}, "fetchCurrencies": False, "fetchMargins": False},
        }
    )


@pytest.fixture
def exchange(live_server, btc_usdt, funded_user, signing_key):
    """A funded trader's CCXT client; a second user keeps a book to trade against (bid 59,000, ask 60,000)."""
    maker, trader = funded_user(btc="5", usdt="500000"), funded_user(btc="2", usdt="200000")
    place(maker, side="sell", price="60000", qty="0.5")
    place(maker, side="buy", price="59000", qty="0.5")
    client = binance_client(live_server.url, *signing_key(trader, "read", "trade"))
    client.load_markets()
    yield client
    client.session.close()  # no kept-alive connection holds a server thread (and its database session) open


def test_markets(exchange):
    market = exchange.market(SYMBOL)
    check_market(exchange, SKIP, "loadMarkets", market)
    assert (market["id"], market["spot"], market["active"]) == ("BTCUSDT", True, True)
    assert market["precision"]["price"] == 0.01 and market["precision"]["amount"] == 0.0001
    assert market["limits"]["amount"]["min"] == 0.0001 and market["limits"]["cost"]["min"] == 1


def test_public_market_data(exchange):
    now = exchange.milliseconds()
    exchange.create_order(SYMBOL, "limit", "buy", 0.1, 60000)  # one trade for the tickers, trades and candles
    ticker = exchange.fetch_ticker(SYMBOL)
    check_ticker(exchange, SKIP, "fetchTicker", ticker, SYMBOL)
    assert ticker["last"] == 60000 and ticker["bid"] == 59000 and ticker["ask"] == 60000
    tickers = exchange.fetch_tickers()
    for entry in tickers.values():
        check_ticker(exchange, SKIP, "fetchTickers", entry, entry["symbol"])
    assert list(tickers) == [SYMBOL]
    book = exchange.fetch_order_book(SYMBOL)
    check_order_book(exchange, SKIP_BOOK_TIME, "fetchOrderBook", book, SYMBOL)
    assert book["bids"][0] == [59000, 0.5] and book["asks"][0] == [60000, 0.4]
    trades = exchange.fetch_trades(SYMBOL)
    for trade in trades:
        check_trade(exchange, SKIP, "fetchTrades", trade, SYMBOL, now, True)
    assert [(t["price"], t["amount"], t["side"]) for t in trades] == [(60000, 0.1, "buy")]
    candles = exchange.fetch_ohlcv(SYMBOL, "1m")
    for candle in candles:
        check_ohlcv(exchange, SKIP, "fetchOHLCV", candle, SYMBOL, now)
    assert candles[0][1:] == [60000, 60000, 60000, 60000, 0.1]
    assert [c[1:] for c in candles[1:]] in ([], [[60000, 60000, 60000, 60000, 0]])  # a minute has begun since: flat
    half_hours = exchange.fetch_ohlcv(SYMBOL, "30m")  # summed from the 15m candles (freqtrade's 30m timeframe)
    for candle in half_hours:
        check_ohlcv(exchange, SKIP, "fetchOHLCV", candle, SYMBOL, now)
    assert half_hours[0][0] % 1_800_000 == 0 and half_hours[0][1:] == [60000, 60000, 60000, 60000, 0.1]
    assert [c[1:] for c in half_hours[1:]] in ([], [[60000, 60000, 60000, 60000, 0]])


def test_balance_and_orders(exchange):
    now = exchange.milliseconds()
    balance = exchange.fetch_balance()
    check_balance(exchange, SKIP, "fetchBalance", balance)
    assert balance["USDT"] == {"free": 200000, "used": 0, "total": 200000}

    resting = exchange.create_order(SYMBOL, "limit", "buy", 0.1, 50000)
    check_order(exchange, SKIP, "createOrder", resting, SYMBOL, now)
    assert (resting["status"], resting["filled"], resting["remaining"]) == ("open", 0, 0.1)
    taken = exchange.create_order(SYMBOL, "market", "buy", 0.1)
    check_order(exchange, SKIP, "createOrder", taken, SYMBOL, now)
    assert (taken["status"], taken["filled"], taken["average"]) == ("closed", 0.1, 60000)
    assert taken["fee"] == {"cost": 0.0001, "currency": "BTC"}
    ioc = exchange.create_order(SYMBOL, "limit", "sell", 0.7, 59000, {"timeInForce": "IOC"})
    check_order(exchange, SKIP_STATUS, "createOrder", ioc, SYMBOL, now)
    assert (ioc["status"], ioc["filled"], ioc["timeInForce"]) == ("expired", 0.5, "IOC")
    post_only = exchange.create_order(SYMBOL, "limit", "sell", 0.1, 65000, {"postOnly": True})
    check_order(exchange, SKIP, "createOrder", post_only, SYMBOL, now)
    with pytest.raises(ccxt.OrderImmediatelyFillable):
        exchange.create_order(SYMBOL, "limit", "buy", 0.1, 61000, {"postOnly": True})
    with pytest.raises(ccxt.InsufficientFunds):
        exchange.create_order(SYMBOL, "limit", "buy", 100, 50000)
    with pytest.raises(ccxt.InvalidOrder):
        exchange.create_order(SYMBOL, "limit", "buy", 0.1, 0.001)  # 0.0001 USDT: below the notional filter

    fetched = exchange.fetch_order(resting["id"], SYMBOL)
    check_order(exchange, SKIP, "fetchOrder", fetched, SYMBOL, now)
    assert fetched["id"] == resting["id"] and fetched["clientOrderId"] == resting["clientOrderId"]
    open_orders = exchange.fetch_open_orders(SYMBOL)
    for order in open_orders:
        check_order(exchange, SKIP, "fetchOpenOrders", order, SYMBOL, now)
    assert sorted(o["id"] for o in open_orders) == sorted([resting["id"], post_only["id"]])
    closed = exchange.fetch_closed_orders(SYMBOL)
    for order in closed:
        check_order(exchange, SKIP, "fetchClosedOrders", order, SYMBOL, now)
    assert [o["id"] for o in closed] == [taken["id"]]  # CCXT keeps "closed" only: the expired IOC is not listed
    mine = exchange.fetch_my_trades(SYMBOL)
    for trade in mine:
        check_trade(exchange, SKIP, "fetchMyTrades", trade, SYMBOL, now, False)
    assert [(t["side"], t["amount"], t["takerOrMaker"]) for t in mine] == [
        ("buy", 0.1, "taker"),
        ("sell", 0.5, "taker"),
    ]

    cancelled = exchange.cancel_order(resting["id"], SYMBOL)
    check_order(exchange, SKIP, "cancelOrder", cancelled, SYMBOL, now)
    assert cancelled["status"] == "canceled"
    with pytest.raises(ccxt.OrderNotFound):
        exchange.fetch_order("999999999", SYMBOL)
    exchange.create_order(SYMBOL, "limit", "buy", 0.1, 40000)
    all_cancelled = exchange.cancel_all_orders(SYMBOL)
    for order in all_cancelled:
        check_order(exchange, SKIP, "cancelAllOrders", order, SYMBOL, now)
    assert len(all_cancelled) == 2 and exchange.fetch_open_orders(SYMBOL) == []
    balance = exchange.fetch_balance()
    assert balance["USDT"]["used"] == 0 and balance["BTC"]["used"] == 0


def test_an_order_or_cancel_whose_outcome_is_not_known_in_time_is_a_timeout_not_a_rejection(exchange, settings, client):
    """Sequencer mode with no engine running: the command stays queued and may still be applied, so a bot must
    see CCXT's ``RequestTimeout`` (Binance's -1007, HTTP 5xx), never ``InvalidOrder`` (-2010: refused)."""
    resting = exchange.create_order(SYMBOL, "limit", "buy", 0.1, 50000)
    settings.ORDERS_ENGINE, settings.ORDERS_ENGINE_WAIT_SECONDS = "sequencer", 0.2
    try:
        with pytest.raises(ccxt.RequestTimeout, match="-1007"):
            exchange.create_order(SYMBOL, "limit", "buy", 0.1, 40000, {"clientOrderId": "late-1"})
        # Queried by its client id while queued: unknown again, never OrderNotFound (-2013), which made a bot place
        # it again under a new id (break-it review).
        with pytest.raises(ccxt.RequestTimeout, match="-1007"):
            exchange.fetch_order(None, SYMBOL, {"origClientOrderId": "late-1"})
        with pytest.raises(ccxt.OrderNotFound):
            exchange.fetch_order(None, SYMBOL, {"origClientOrderId": "never-sent"})
        with pytest.raises(ccxt.RequestTimeout, match="-1007"):
            exchange.cancel_order(resting["id"], SYMBOL)
        with pytest.raises(ccxt.RequestTimeout, match="-1007"):
            exchange.cancel_all_orders(SYMBOL)
        signed = Signer(client, exchange.apiKey, exchange.secret)
        response = signed("POST", "order", symbol="BTCUSDT", side="BUY", type="MARKET", quantity="0.1")
    finally:
        queue_connection_close()

    assert response.status_code == 504
    assert response.json() == {
        "code": -1007,
        "msg": "Timeout waiting for response from backend server. Send status unknown; execution status unknown.",
    }
    assert not Order.objects.filter(client_order_id="late-1").exists()  # queued, not placed: no engine ran
    assert Order.objects.get(id=resting["id"]).status == OrderStatus.OPEN
    assert Command.objects.filter(status=CommandStatus.PENDING).count() == 4


def test_calls_of_the_families_not_served_are_refused_as_not_supported_never_as_an_outage(exchange):
    """A CCXT review: ``fetch_trading_fees``, ``fetch_status`` and the wallet calls reached ``/not-served/...`` and
    got an HTML 404, which CCXT raises as ``ExchangeNotAvailable``: a bot retries that as an outage for ever."""
    calls = {
        "fetch_trading_fees": exchange.fetch_trading_fees,
        "fetch_status": exchange.fetch_status,
        "fetch_deposit_address": lambda: exchange.fetch_deposit_address("BTC"),
        "withdraw": lambda: exchange.withdraw("BTC", 0.1, "bcrt1qexample"),
    }
    for name, call in calls.items():
        with pytest.raises(ccxt.BaseError) as refused:
            call()
        assert isinstance(refused.value, ccxt.NotSupported | ccxt.BadRequest), (name, repr(refused.value))
        assert not isinstance(refused.value, ccxt.NetworkError), name  # ExchangeNotAvailable is one
        assert "This operation is not supported." in str(refused.value), name
