"""``ccxt.pro.binance``, unchanged, against live uvicorn processes and the relay: its watched order book,
trades and orders agree with REST after a burst of trading.

The server is ``live_asgi`` (uvicorn serving ``exchange.asgi``, HTTP and WebSocket, and the streams' relay),
reading the test database; REST goes to the same process as the streams.
"""

import asyncio

import ccxt
import ccxt.pro
import pytest

from apps.orders.models import Trade
from apps.orders.tests.helpers import place

pytestmark = pytest.mark.django_db(transaction=True)

SYMBOL = "BTC/USDT"


def pro_client(web: str, api_key: str, secret: str) -> ccxt.pro.binance:
    """README's configuration: every REST and WebSocket URL family of ccxt.pro's binance names ``web``; those
    not served are ``/not-served/...``."""
    api, ws = f"http://{web}/api/v3", f"ws://{web}"
    defaults = ccxt.pro.binance().urls["api"]
    elsewhere = {name: f"http://{web}/not-served/{name}" for name in defaults}
    ws_elsewhere = {name: f"{ws}/not-served/ws/{name}" for name in defaults["ws"]}
    ws_api_elsewhere = {name: f"{ws}/not-served/ws-api/{name}" for name in defaults["ws"]["ws-api"]}
    return ccxt.pro.binance(
        {
            "urls": {
                "api": {
                    **elsewhere,
                    "public": api,
                    "private": api,
                    "ws": {
                        **ws_elsewhere,
                        "spot": f"{ws}/ws",
                        "ws-api": {**ws_api_elsewhere, "spot": f"{ws}/ws-api/v3"},
                    },
                }
            },
            "apiKey": api_key,
            "secret": secret,
            "options": {"fetchMarkets": {"types": ["spot"]}, "fetchCurrencies": False, "fetchMargins": False},
        }
    )


async def _pump(watch):
    while True:
        await watch()


async def _until(check, timeout: float = 30):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        problem = await check()
        if problem is None:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(problem)
        await asyncio.sleep(0.2)


async def _burst_and_compare(exchange: ccxt.pro.binance, checks: tuple[str, ...]) -> None:
    await exchange.load_markets()
    watchers = [
        asyncio.create_task(_pump(lambda: exchange.watch_order_book(SYMBOL))),
        asyncio.create_task(_pump(lambda: exchange.watch_trades(SYMBOL))),
        asyncio.create_task(_pump(lambda: exchange.watch_orders(SYMBOL))),
    ]
    try:
        await asyncio.sleep(1)  # subscribed (and the book's snapshot taken) before the trading starts
        placed = []
        for i in range(6):  # resting bids between the maker's bid (58,500) and asks (60,500 up)
            placed.append(await exchange.create_order(SYMBOL, "limit", "buy", 0.1, 59000 + 100 * i))
        placed.append(await exchange.create_order(SYMBOL, "market", "buy", 0.3))  # three fills at 60,500
        placed.append(await exchange.create_order(SYMBOL, "limit", "buy", 0.5, 61000))  # 60,500 and 60,600, rests
        placed.append(await exchange.create_order(SYMBOL, "limit", "sell", 0.1, 58000, {"timeInForce": "IOC"}))
        await exchange.cancel_order(placed[0]["id"], SYMBOL)

        async def book_matches():
            rest = await exchange.fetch_order_book(SYMBOL)
            watched = exchange.orderbooks.get(SYMBOL)
            if watched is None:
                return "no book watched yet"
            bids, asks = watched["bids"][: len(rest["bids"])], watched["asks"][: len(rest["asks"])]
            if (bids, asks) != (rest["bids"], rest["asks"]) or len(watched["bids"]) != len(rest["bids"]):
                return f"book {bids} {asks} != REST {rest['bids']} {rest['asks']}"
            return None

        async def trades_match():
            rest = await exchange.fetch_trades(SYMBOL, limit=1000, params={"fetchTradesMethod": "publicGetTrades"})
            watched = list(exchange.trades.get(SYMBOL, []))
            rest_rows = [(t["timestamp"], t["price"], t["amount"], t["side"]) for t in rest]
            watched_rows = [(t["timestamp"], t["price"], t["amount"], t["side"]) for t in watched]
            return None if rest_rows and watched_rows == rest_rows else f"trades {watched_rows} != REST {rest_rows}"

        async def orders_match():
            watched = {order["id"]: order for order in (exchange.orders or [])}
            for order in placed:
                rest = await exchange.fetch_order(order["id"], SYMBOL)
                seen = watched.get(order["id"])
                if seen is None or (seen["status"], seen["filled"]) != (rest["status"], rest["filled"]):
                    return f"order {order['id']}: watched {seen and (seen['status'], seen['filled'])}, REST {(rest['status'], rest['filled'])}"
            return None

        for check in checks:
            await _until({"book": book_matches, "trades": trades_match, "orders": orders_match}[check])
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await exchange.close()


def _trade_and_watch(web, funded_user, signing_key, checks):
    maker, trader = funded_user(btc="5", usdt="500000"), funded_user(btc="5", usdt="500000")
    for qty in ("0.1", "0.1", "0.1", "0.1"):
        place(maker, side="sell", price="60500", qty=qty)
    place(maker, side="sell", price="60600", qty="0.2")
    place(maker, side="buy", price="58500", qty="0.5")
    exchange = pro_client(web, *signing_key(trader, "read", "trade"))
    asyncio.run(_burst_and_compare(exchange, checks))


def test_watched_book_and_orders_agree_with_rest(live_asgi, btc_usdt, funded_user, signing_key):
    _trade_and_watch(live_asgi, funded_user, signing_key, ("book", "orders"))


def test_watched_trades_agree_with_rest(live_asgi, btc_usdt, funded_user, signing_key):
    _trade_and_watch(live_asgi, funded_user, signing_key, ("trades",))


def test_a_stream_the_server_does_not_serve_is_a_ccxt_error_that_bots_catch(
    live_asgi, btc_usdt, funded_user, signing_key
):
    """A refusal with a text code (``"invalid_request"``) made ccxt's error handler raise a bare ``ValueError`` ("too
    many values to unpack"), which a bot catching ``ccxt.BaseError`` does not expect: Binance's code is a number."""
    exchange = pro_client(live_asgi, *signing_key(funded_user(usdt="1"), "read"))

    async def refused_watch() -> Exception:
        await exchange.load_markets()
        try:
            await asyncio.wait_for(exchange.watch_ohlcv(SYMBOL, "1s"), 20)  # no kline_1s stream here
        except Exception as exc:
            return exc
        finally:
            await exchange.close()
        raise AssertionError("watching kline_1s was not refused")

    error = asyncio.run(refused_watch())

    assert isinstance(error, ccxt.BaseError), repr(error)
    assert "No stream 'kline_1s'" in str(error)


def test_watched_two_hour_candles_carry_the_trade(live_asgi, btc_usdt, funded_user, signing_key):
    """freqtrade on a 2h timeframe: ``watch_ohlcv(symbol, "2h")`` subscribes to ``kline_2h`` (summed from the 1h
    candles), which was refused as no stream; the relay's 2 s push gives the trade's candle."""
    maker, trader = funded_user(btc="1"), funded_user(usdt="100000")
    place(maker, side="sell", price="60500", qty="0.2")
    place(trader, side="buy", price="60500", qty="0.1")
    two_hours = int(Trade.objects.get().created_at.timestamp() * 1000) // 7_200_000 * 7_200_000
    exchange = pro_client(live_asgi, *signing_key(trader, "read"))

    async def watched() -> list:
        await exchange.load_markets()
        try:
            return await asyncio.wait_for(exchange.watch_ohlcv(SYMBOL, "2h"), 20)
        finally:
            await exchange.close()

    candle = asyncio.run(watched())[-1]

    if candle[0] == two_hours:  # the trade's two hours (else they had ended: the next two, flat)
        assert candle[1:] == [60500, 60500, 60500, 60500, 0.1]
    else:
        assert candle == [two_hours + 7_200_000, 60500, 60500, 60500, 60500, 0]


def test_watched_tickers_of_one_market_and_of_all_markets_carry_the_last_trade(
    live_asgi, btc_usdt, funded_user, signing_key
):
    """ccxt.pro's defaults: ``watch_ticker`` and ``watch_tickers([...])`` subscribe to ``<symbol>@miniTicker``,
    ``watch_tickers()`` to ``!miniTicker@arr`` (every market), ``name: ticker`` to ``!ticker@arr``; none was served."""
    maker, trader = funded_user(btc="1"), funded_user(usdt="100000")
    place(maker, side="sell", price="60500", qty="0.2")
    exchange = pro_client(live_asgi, *signing_key(trader, "read", "trade"))

    async def traded(watch) -> dict:
        """The first ticker ``watch`` gives that counts the trade (the maker's order may be published before it)."""
        while True:
            ticker = await watch()
            if ticker.get(SYMBOL, ticker).get("last") is not None:
                return ticker

    async def watch_and_trade() -> list:
        await exchange.load_markets()
        watches = [
            asyncio.create_task(traded(lambda: exchange.watch_ticker(SYMBOL))),
            asyncio.create_task(traded(exchange.watch_tickers)),
            asyncio.create_task(traded(lambda: exchange.watch_tickers(None, {"name": "ticker"}))),
        ]
        try:
            await asyncio.sleep(1)  # subscribed before the trade, whose ticker is published once
            await exchange.create_order(SYMBOL, "limit", "buy", 0.1, 60500)
            return await asyncio.wait_for(asyncio.gather(*watches), 20)
        finally:
            for watch in watches:
                watch.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
            await exchange.close()

    mini, every_mini, every_full = asyncio.run(watch_and_trade())

    assert (mini["symbol"], mini["last"], mini["baseVolume"], mini["quoteVolume"]) == (SYMBOL, 60500, 0.1, 6050)
    assert (every_mini[SYMBOL]["last"], every_mini[SYMBOL]["baseVolume"]) == (60500, 0.1)
    full = every_full[SYMBOL]
    assert (full["last"], full["ask"], full["askVolume"], full["baseVolume"]) == (60500, 60500, 0.1, 0.1)
