"""Public endpoints of ``/api/v3/`` (Binance's "General endpoints" and "Market data endpoints").

Thin handlers over apps.orders' and apps.marketdata's selectors; weights are Binance's.
``depth``'s ``lastUpdateId`` is the market's book sequence, which rises with every change of
the book (each placement and cancel).
"""

import re
from datetime import datetime, timedelta
from typing import Literal, overload

from django.utils import timezone

from apps.marketdata.intervals import KLINE_INTERVALS, bucket_shift
from apps.marketdata.selectors import candles_continuous, ticker_24h, tickers_24h
from apps.orders.models import Market
from apps.orders.selectors import market_list, order_book_depth

from . import limits
from .endpoint import Call, Security, endpoint
from .errors import (
    BAD_INTERVAL,
    BAD_SYMBOL,
    MORE_THAN_XX_HOURS,
    PARAM_NOT_REQUIRED,
    BinanceError,
    illegal,
    invalid_value,
)
from .params import MAX_INT64, Params
from .selectors import (
    agg_trades,
    average_price,
    last_trade,
    market_trades,
)
from .shapes import binance_symbol, from_ms, market_info, ms, price_text, public_trade, qty_text

_SYMBOL = re.compile(r"[A-Z0-9]{2,20}")
MAX_LIMIT = 1000
MAX_DEPTH_LEVELS = 1000  # order_book_depth's maximum; Binance takes up to 5000 and returns what there is


def markets_by_symbol() -> dict[str, Market]:
    """Every market by its Binance symbol (``BTCUSDT``)."""
    return {binance_symbol(market): market for market in market_list()}


@overload
def symbol_market(params: Params, *, required: Literal[True] = True) -> Market: ...
@overload
def symbol_market(params: Params, *, required: bool) -> Market | None: ...
def symbol_market(params: Params, *, required: bool = True) -> Market | None:
    """The market named by ``symbol``: -1102 when required and absent, -1121 when unknown."""
    symbol = params.text("symbol", required=required, pattern=_SYMBOL)
    if symbol is None:
        return None
    market = markets_by_symbol().get(symbol)
    if market is None:
        raise BinanceError(BAD_SYMBOL, "Invalid symbol.")
    return market


def symbols_markets(params: Params) -> list[Market] | None:
    """The markets of ``symbols`` (a JSON list such as ``["BTCUSDT","ETHUSDT"]``), or None when not sent."""
    raw = params.raw("symbols")
    if raw is None:
        return None
    if not re.fullmatch(r'\[("[A-Z0-9]{2,20}")(,"[A-Z0-9]{2,20}")*\]', raw):
        raise illegal("symbols", '["BTCUSDT","ETHUSDT"]')
    known = markets_by_symbol()
    names = re.findall(r"[A-Z0-9]{2,20}", raw)
    if any(name not in known for name in names):
        raise BinanceError(BAD_SYMBOL, "Invalid symbol.")
    return [known[name] for name in names]


# The last millisecond of year 9999: the latest time a datetime (and so a query bound) can hold.
MAX_TIME_MS = 253402300799999


def time_param(params: Params, name: str) -> datetime | None:
    """A time in ms since the epoch (``startTime``, ``endTime``) as an aware UTC datetime (exact), ``None`` when absent.

    -1100 naming the legal range when not digits or beyond year 9999 (no datetime holds it).
    """
    value = params.integer(name, maximum=MAX_TIME_MS)
    return None if value is None else from_ms(value)


def time_range(params: Params, *, max_hours: int) -> tuple[datetime | None, datetime | None]:
    """``startTime`` and ``endTime`` (:func:`time_param`), refused with -1127 when both are sent and further apart
    than ``max_hours`` (Binance's rules: 24 for ``allOrders`` and ``myTrades``, "The time between startTime and
    endTime can't be longer than 24 hours"; 1 for ``aggTrades``). A ``startTime`` after ``endTime`` is an empty range,
    not an error."""
    start, end = time_param(params, "startTime"), time_param(params, "endTime")
    if start is not None and end is not None and end - start > timedelta(hours=max_hours):
        raise BinanceError(MORE_THAN_XX_HOURS, f"More than {max_hours} hours between startTime and endTime.")
    return start, end


def _limit(params: Params, default: int, maximum: int = MAX_LIMIT) -> int:
    return params.integer("limit", default=default, minimum=1, maximum=maximum)


@endpoint(weight=1)
def ping(call: Call) -> dict:
    return {}


@endpoint(weight=1)
def server_time(call: Call) -> dict:
    return {"serverTime": call.now_ms}


@endpoint(weight=20, params=("symbol", "symbols", "permissions", "showPermissionSets", "symbolStatus"))
def exchange_info(call: Call) -> dict:
    """Every market (or those of ``symbol``/``symbols``) with its filters, and the rate limits."""
    single = symbol_market(call.params, required=False)
    chosen = [single] if single is not None else symbols_markets(call.params)
    status = call.params.choice("symbolStatus", ("TRADING", "HALT", "BREAK"))
    infos = [market_info(market) for market in (chosen if chosen is not None else market_list())]
    if status is not None:
        infos = [info for info in infos if info["status"] == status]
    return {
        "timezone": "UTC",
        "serverTime": call.now_ms,
        "rateLimits": limits.rate_limits(),
        "exchangeFilters": [],
        "symbols": infos,
    }


def _depth_weight(params: Params) -> int:
    """Binance's weight of ``depth`` by its ``limit``; a ``limit`` it refuses (-1100, :meth:`Params.integer`) weighs
    as the default's."""
    try:
        limit = params.integer("limit", default=100)
    except BinanceError:
        limit = 100
    return 5 if limit <= 100 else 25 if limit <= 500 else 50 if limit <= 1000 else 250


@endpoint(weight=_depth_weight, params=("symbol", "limit"))
def depth(call: Call) -> dict:
    market = symbol_market(call.params)
    # Binance: "If limit > 5000, then the response will truncate to 5000" (break-it review: -1100 here).
    limit = min(_limit(call.params, 100, maximum=MAX_INT64), 5000)
    book = order_book_depth(market=market.symbol, limit=min(limit, MAX_DEPTH_LEVELS))
    return {
        "lastUpdateId": book.sequence,
        "bids": [[price_text(price, market), qty_text(qty, market)] for price, qty in book.bids],
        "asks": [[price_text(price, market), qty_text(qty, market)] for price, qty in book.asks],
    }


@endpoint(weight=25, params=("symbol", "limit"))
def trades(call: Call) -> list:
    market = symbol_market(call.params)
    return [public_trade(t, market) for t in market_trades(market=market, limit=_limit(call.params, 500))]


@endpoint(weight=25, security=Security.MARKET_DATA, params=("symbol", "limit", "fromId"))
def historical_trades(call: Call) -> list:
    market = symbol_market(call.params)
    rows = market_trades(market=market, limit=_limit(call.params, 500), from_number=call.params.integer("fromId"))
    return [public_trade(t, market) for t in rows]


@endpoint(weight=4, params=("symbol", "fromId", "startTime", "endTime", "limit"))
def aggregate_trades(call: Call) -> list:
    market = symbol_market(call.params)
    start, end = time_range(call.params, max_hours=1)  # Binance: "must be less than 1 hour" (CCXT sends exactly 1)
    rows = agg_trades(
        market=market,
        limit=_limit(call.params, 500),
        from_number=call.params.integer("fromId"),
        start=start,
        end=end,
    )
    return [
        {
            "a": row.first,
            "p": price_text(row.price, market),
            "q": qty_text(row.qty, market),
            "f": row.first,
            "l": row.last,
            "T": ms(row.time),
            "m": row.buyer_is_maker,
            "M": True,
        }
        for row in rows
    ]


@endpoint(weight=2, params=("symbol", "interval", "startTime", "endTime", "limit", "timeZone"))
def klines(call: Call) -> list:
    """Candles oldest first: ``[open time, open, high, low, close, volume, close time, quote volume, trades,
    taker buy base volume, taker buy quote volume, "0"]``; Binance's intervals 1m 3m 5m 15m 30m 1h 2h 4h 6h 8h 12h 1d
    3d 1w 1M (1s and others -1120), UTC, 1w opening on Mondays and 1M on the first of the month. Every bucket from
    the market's first trade on, a flat one with no volume where nothing traded, as Binance's
    (:func:`~apps.marketdata.selectors.candles_continuous`)."""
    market = symbol_market(call.params)
    interval = call.params.choice(
        "interval", KLINE_INTERVALS, required=True, error=BinanceError(BAD_INTERVAL, "Invalid interval.")
    )
    if call.params.raw("timeZone") not in (None, "0", "+00:00", "0:00"):
        raise invalid_value("timeZone")
    start, end = time_param(call.params, "startTime"), time_param(call.params, "endTime")
    if start is not None and end is not None and start > end:
        return []  # an empty range, as allOrders and myTrades answer it
    rows = candles_continuous(
        market=market.symbol,
        interval=interval,
        start=start,
        end=None if end is None else end + timedelta(microseconds=1),
        limit=_limit(call.params, 500),
    )
    out = []
    for row in rows:
        out.append(
            [
                ms(row.open_time),
                price_text(row.open, market),
                price_text(row.high, market),
                price_text(row.low, market),
                price_text(row.close, market),
                qty_text(row.volume, market),
                ms(bucket_shift(interval, row.open_time, 1)) - 1,  # Binance: the candle's last millisecond
                price_text(row.quote_volume, market),
                row.trades,
                qty_text(row.taker_buy_volume, market),
                price_text(row.taker_buy_quote_volume, market),
                "0",
            ]
        )
    return out


@endpoint(weight=2, params=("symbol",))
def avg_price(call: Call) -> dict:
    market = symbol_market(call.params)
    now = timezone.now()
    price = average_price(market=market, now=now)
    return {"mins": 5, "price": price_text(price, market), "closeTime": ms(now)}


def _ticker_weight(params: Params, single: int, every: int) -> int:
    if params.raw("symbol"):
        return single
    symbols = params.raw("symbols")
    if symbols:
        return min(every, single * max(1, symbols.count(",") + 1))
    return every


def _chosen(params: Params) -> tuple[list[Market], bool]:
    """The markets a ticker endpoint reports and whether one object (``symbol``) rather than a list is asked."""
    single = symbol_market(params, required=False)
    if single is not None:
        if params.raw("symbols") is not None:
            raise BinanceError(PARAM_NOT_REQUIRED, "Parameter 'symbols' sent when not required.")
        return [single], True
    chosen = symbols_markets(params)
    return (chosen if chosen is not None else market_list()), False


def _ticker_out(ticker, full: bool) -> dict:
    market = ticker.market
    out = {
        "symbol": binance_symbol(market),
        "openPrice": price_text(ticker.open, market),
        "highPrice": price_text(ticker.high, market),
        "lowPrice": price_text(ticker.low, market),
        "lastPrice": price_text(ticker.last, market),
        "volume": qty_text(ticker.volume, market),
        "quoteVolume": price_text(ticker.quote_volume, market),
        "openTime": ms(ticker.open_time),
        "closeTime": ms(ticker.close_time),
    }
    out.update(
        {
            "firstId": -1 if ticker.first_trade is None else ticker.first_trade,
            "lastId": -1 if ticker.last_trade is None else ticker.last_trade,
            "count": ticker.trades,
        }
    )
    if not full:
        return out
    weighted = ticker.quote_volume / ticker.volume if ticker.volume else None
    return {
        "symbol": out["symbol"],
        "priceChange": price_text(ticker.change, market),
        "priceChangePercent": f"{ticker.change_percent or 0:.3f}",
        "weightedAvgPrice": price_text(None if weighted is None else weighted.quantize(market.quote.quantum), market),
        "prevClosePrice": price_text(ticker.prev_close, market),
        "lastQty": qty_text(ticker.last_qty, market),
        "bidPrice": price_text(ticker.bid, market),
        "bidQty": qty_text(ticker.bid_qty, market),
        "askPrice": price_text(ticker.ask, market),
        "askQty": qty_text(ticker.ask_qty, market),
        **{k: v for k, v in out.items() if k != "symbol"},
    }


def _tickers(params: Params) -> tuple[list, bool]:
    chosen, single = _chosen(params)
    by_symbol = {t.market.symbol: t for t in (tickers_24h() if not single else [ticker_24h(market=chosen[0].symbol)])}
    return [by_symbol[market.symbol] for market in chosen], single


@endpoint(weight=lambda p: _ticker_weight(p, 2, 80), params=("symbol", "symbols", "type"))
def ticker_24hr(call: Call):
    """The rolling 24-hour statistics (``type`` FULL, the default, or MINI)."""
    full = call.params.choice("type", ("FULL", "MINI")) != "MINI"
    rows, single = _tickers(call.params)
    out = [_ticker_out(t, full) for t in rows]
    return out[0] if single else out


@endpoint(weight=lambda p: _ticker_weight(p, 4, 200), params=("symbol", "symbols", "windowSize", "type"))
def ticker_window(call: Call):
    """The rolling-window ticker; only ``windowSize=1d`` (the default) is kept, others are -1130."""
    if call.params.raw("windowSize") not in (None, "1d"):
        raise invalid_value("windowSize")
    full = call.params.choice("type", ("FULL", "MINI")) != "MINI"
    rows, single = _tickers(call.params)
    out = [_ticker_out(t, full) for t in rows]
    for row in out:
        for name in ("prevClosePrice", "lastQty", "bidPrice", "bidQty", "askPrice", "askQty"):
            row.pop(name, None)
    return out[0] if single else out


@endpoint(weight=lambda p: _ticker_weight(p, 2, 4), params=("symbol", "symbols"))
def ticker_price(call: Call):
    chosen, single = _chosen(call.params)
    out = []
    for market in chosen:
        latest = last_trade(market=market)
        out.append(
            {"symbol": binance_symbol(market), "price": price_text(None if latest is None else latest.price, market)}
        )
    return out[0] if single else out


@endpoint(weight=lambda p: _ticker_weight(p, 2, 4), params=("symbol", "symbols"))
def book_ticker(call: Call):
    chosen, single = _chosen(call.params)
    out = []
    for market in chosen:
        book = order_book_depth(market=market.symbol, limit=1)
        bid = book.bids[0] if book.bids else (None, None)
        ask = book.asks[0] if book.asks else (None, None)
        out.append(
            {
                "symbol": binance_symbol(market),
                "bidPrice": price_text(bid[0], market),
                "bidQty": qty_text(bid[1], market),
                "askPrice": price_text(ask[0], market),
                "askQty": qty_text(ask[1], market),
            }
        )
    return out[0] if single else out
