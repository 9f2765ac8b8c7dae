"""Binance-shaped stream events built from outbox rows; pure functions, no database.

Shapes follow Binance's spot WebSocket streams (``depthUpdate``, ``trade``, ``aggTrade``, ``bookTicker``)
and user data stream (``executionReport``, ``outboundAccountPosition``); deposits and
withdrawals, which Binance's user stream does not carry, are ``depositUpdate`` and
``withdrawalUpdate`` holding the REST API's object. Symbols are Binance's (``BTCUSDT``),
amounts plain decimal strings at the asset's precision, times epoch milliseconds.
"""

from dataclasses import dataclass
from decimal import Decimal

from apps.ledger.amounts import format_amount
from apps.orders.models import EndReason, OrderStatus, SelfTradePrevention
from apps.orders.selectors import Depth

STATUS = {
    "open": "NEW",
    "partially_filled": "PARTIALLY_FILLED",
    "filled": "FILLED",
    "cancelled": "CANCELED",
    "expired": "EXPIRED",
    "rejected": "REJECTED",
}


@dataclass(frozen=True)
class MarketInfo:
    """What formatting a market's events needs: its symbols and its assets' codes and precisions."""

    id: int
    symbol: str  # BTC-USDT
    base_id: int
    base: str
    base_decimals: int
    quote_id: int
    quote: str
    quote_decimals: int

    @classmethod
    def of(cls, market) -> "MarketInfo":
        """From a :class:`~apps.orders.models.Market` with its ``base`` and ``quote`` loaded."""
        base, quote = market.base, market.quote
        return cls(market.id, market.symbol, base.id, base.code, base.decimals, quote.id, quote.code, quote.decimals)

    @property
    def stream_symbol(self) -> str:
        """``btcusdt``: the symbol in stream names."""
        return self.symbol.replace("-", "").lower()

    @property
    def event_symbol(self) -> str:
        """``BTCUSDT``: the symbol inside events."""
        return self.symbol.replace("-", "")

    def price(self, value) -> str:
        return format_amount(Decimal(value), self.quote_decimals)

    def qty(self, value) -> str:
        return format_amount(Decimal(value), self.base_decimals)


@dataclass(frozen=True)
class BookChange:
    """One outbox ``book`` row: the market's update ``update_id`` and its payload."""

    update_id: int
    payload: dict


def depth_update(market: MarketInfo, changes: list[BookChange], now_ms: int) -> dict:
    """One ``depthUpdate`` for consecutive changes: ``U`` the first update id, ``u`` the last.

    Each level changed in ``U..u`` appears once with the quantity resting there after ``u``
    (``"0..."``: gone), so a book at any update id from ``U - 1`` to ``u`` becomes the book at ``u``.
    """
    levels: dict[tuple[str, str], str] = {}
    for change in changes:
        for side, price, qty in change.payload["levels"]:
            levels[(side, market.price(price))] = market.qty(qty)
    bids = sorted(((p, q) for (s, p), q in levels.items() if s == "buy"), key=lambda level: -Decimal(level[0]))
    asks = sorted(((p, q) for (s, p), q in levels.items() if s == "sell"), key=lambda level: Decimal(level[0]))
    return {
        "e": "depthUpdate",
        "E": now_ms,
        "s": market.event_symbol,
        "U": changes[0].update_id,
        "u": changes[-1].update_id,
        "b": [list(level) for level in bids],
        "a": [list(level) for level in asks],
    }


def book_ticker(market: MarketInfo, change: BookChange) -> dict:
    """``bookTicker``: the best bid and ask (price, quantity) after update ``u``; empty sides are ``"0"``."""
    bid = change.payload.get("bid") or ["0", "0"]
    ask = change.payload.get("ask") or ["0", "0"]
    return {
        "u": change.update_id,
        "s": market.event_symbol,
        "b": market.price(bid[0]),
        "B": market.qty(bid[1]),
        "a": market.price(ask[0]),
        "A": market.qty(ask[1]),
    }


def trades(market: MarketInfo, change: BookChange, now_ms: int) -> list[dict]:
    """One ``trade`` event per trade of the change; ``m`` is true when the buyer was the maker."""
    return [
        {
            "e": "trade",
            "E": now_ms,
            "s": market.event_symbol,
            "t": trade["number"],  # the integer trade id of /api/v3/ (Trade.number)
            "p": market.price(trade["price"]),
            "q": market.qty(trade["qty"]),
            "T": trade["time"],
            "m": trade["taker_side"] == "sell",
            "M": True,
        }
        for trade in change.payload["trades"]
    ]


def agg_trades(market: MarketInfo, change: BookChange, now_ms: int) -> list[dict]:
    """One ``aggTrade`` event per run of the change's trades with one taker order and one price, quantities summed: the
    rows of ``GET /api/v3/aggTrades`` (:func:`apps.binance.selectors.agg_trades`), ``a`` its first trade's id as
    there, ``f`` and ``l`` the first and last trade ids."""
    runs: list[list[dict]] = []
    for trade in change.payload["trades"]:
        if runs and (runs[-1][0]["taker_order_id"], runs[-1][0]["price"]) == (trade["taker_order_id"], trade["price"]):
            runs[-1].append(trade)
        else:
            runs.append([trade])
    return [
        {
            "e": "aggTrade",
            "E": now_ms,
            "s": market.event_symbol,
            "a": run[0]["number"],
            "p": market.price(run[0]["price"]),
            "q": market.qty(sum(Decimal(trade["qty"]) for trade in run)),
            "f": run[0]["number"],
            "l": run[-1]["number"],
            "T": run[0]["time"],
            "m": run[0]["taker_side"] == "sell",
            "M": True,
        }
        for run in runs
    ]


def partial_depth(market: MarketInfo, book: Depth, levels: int) -> dict:
    """A partial book depth event (Binance's ``<symbol>@depth<levels>``, which has no event type): the best
    ``levels`` price levels of each side of ``book`` and the update id it is at, as ``GET /api/v3/depth`` shows
    them (``lastUpdateId``, ``[price, quantity]`` pairs, best first)."""
    return {
        "lastUpdateId": book.sequence,
        "bids": [[market.price(price), market.qty(qty)] for price, qty in book.bids[:levels]],
        "asks": [[market.price(price), market.qty(qty)] for price, qty in book.asks[:levels]],
    }


def _report(market: MarketInfo, order: dict, now_ms: int, execution: str, status: str, filled, filled_quote) -> dict:
    """An ``executionReport`` of ``order`` (an outbox order dict) without fill fields.

    As Binance's: ``r`` (reject reason) is ``NONE``, since a refused placement is an error answer and stores no
    order (why an order ended, cancelled or expired, is no reject reason), and ``C`` (the cancelled order's client
    id) is the order's client id on a cancel, empty otherwise (CCXT reads ``C`` before ``c``). ``w`` (is the order on
    the book) is true while it is new or partially filled, and ``W`` (working time: its creation, as the REST shapes'
    ``workingTime``) is sent only then, as Binance sends it only for an order placed on the book. ``P``, ``F`` and
    ``g`` are Binance's values for an order with no stop price, no iceberg and no order list. A post-only limit
    order is ``LIMIT_MAKER`` (as the REST shapes show it); ``V`` is its self-trade prevention mode (events recorded
    before ``post_only`` and ``stp`` were, read as a plain order with the default, ``EXPIRE_TAKER``)."""
    working = status in ("NEW", "PARTIALLY_FILLED")
    report = {
        "e": "executionReport",
        "E": now_ms,
        "s": market.event_symbol,
        "c": order["client_order_id"],
        "C": order["client_order_id"] if execution == "CANCELED" else "",
        "S": order["side"].upper(),
        "o": "LIMIT_MAKER" if order.get("post_only") else order["type"].upper(),
        "f": order["time_in_force"],
        "q": market.qty(order["qty"] if order["qty"] is not None else 0),
        "p": market.price(order["price"] if order["price"] is not None else 0),
        "x": execution,
        "X": status,
        "r": "NONE",
        "i": order["id"],
        "l": market.qty(0),
        "z": market.qty(filled),
        "L": market.price(0),
        "n": "0",  # Binance's too: no fee, in no asset (N)
        "N": None,
        "T": order["updated_at"],
        "t": -1,
        "m": False,
        "O": order["created_at"],
        "Z": market.price(filled_quote),
        "Y": market.price(0),
        "Q": market.price(order["quote_qty"] if order["quote_qty"] is not None else 0),
        "P": market.price(0),
        "F": market.qty(0),
        "g": -1,
        "w": working,
        "V": order.get("stp", SelfTradePrevention.EXPIRE_TAKER).upper(),
    }
    if working:
        report["W"] = order["created_at"]
    return report


def execution_reports(market: MarketInfo, change: BookChange, now_ms: int) -> list[tuple[int, dict]]:
    """``(user id, executionReport)`` for every order the change wrote, in the order they happened.

    A placed order: ``NEW``, then one ``TRADE`` per fill (cumulative ``z``/``Z`` growing), then
    ``EXPIRED`` when it ended unfilled. A resting order filled: one ``TRADE`` (``m`` true); cancelled:
    ``CANCELED``, its ``c`` the cancel request's own client id when it had one (Binance's: ``C`` is the order's).
    An order expired by self-trade prevention (taker or maker): ``TRADE_PREVENTION`` with status
    ``EXPIRED_IN_MATCH``, as Binance's. ``n``/``N`` are the fill's fee and the asset it was taken in.
    """
    orders = {order["id"]: order for order in change.payload["orders"]}
    trade_rows = change.payload["trades"]
    reports: list[tuple[int, dict]] = []
    taker = orders.get(change.payload.get("taker"))
    filled, filled_quote = Decimal(0), Decimal(0)
    if taker is not None:
        reports.append((taker["user_id"], _report(market, taker, now_ms, "NEW", "NEW", 0, 0)))
    for trade in trade_rows:
        qty, quote_qty = Decimal(trade["qty"]), Decimal(trade["quote_qty"])
        maker = orders.get(trade["maker_order_id"])
        if taker is not None:
            filled, filled_quote = filled + qty, filled_quote + quote_qty
            last = filled == Decimal(taker["filled_qty"]) and trade is trade_rows[-1]
            status = STATUS[taker["status"]] if last and taker["status"] == "filled" else "PARTIALLY_FILLED"
            reports.append(
                (taker["user_id"], _fill(market, taker, trade, now_ms, status, filled, filled_quote, maker=False))
            )
        if maker is not None:
            status = STATUS[maker["status"]]
            reports.append(
                (
                    maker["user_id"],
                    _fill(market, maker, trade, now_ms, status, maker["filled_qty"], maker["filled_quote_qty"], True),
                )
            )
    traded = {trade["maker_order_id"] for trade in trade_rows}
    for order in orders.values():
        if order["id"] in traded:
            continue
        if taker is not None and order is taker and order["status"] in ("open", "partially_filled", "filled"):
            continue
        if order["status"] in ("cancelled", "expired", "rejected"):
            execution, status = _ending(order)
            report = _report(market, order, now_ms, execution, status, order["filled_qty"], order["filled_quote_qty"])
            if execution == "CANCELED" and change.payload.get("cancel_client_order_id"):
                report["c"] = change.payload["cancel_client_order_id"]  # the cancel's own id; C stays the order's
            reports.append((order["user_id"], report))
    return reports


def _ending(order: dict) -> tuple[str, str]:
    """``(x, X)`` of an order that ended unfilled: Binance's ``TRADE_PREVENTION`` and ``EXPIRED_IN_MATCH`` when
    self-trade prevention expired it (as the REST shapes' status), else ``CANCELED`` or the status itself."""
    if order["status"] == OrderStatus.EXPIRED and order["reject_reason"] == EndReason.SELF_TRADE_PREVENTION:
        return "TRADE_PREVENTION", "EXPIRED_IN_MATCH"
    execution = "CANCELED" if order["status"] == "cancelled" else order["status"].upper()
    return execution, STATUS[order["status"]]


def _fill(market: MarketInfo, order: dict, trade: dict, now_ms: int, status: str, filled, filled_quote, maker: bool):
    report = _report(market, order, now_ms, "TRADE", status, filled, filled_quote)
    buyer = order["side"] == "buy"
    fee = trade["maker_fee"] if maker else trade["taker_fee"]
    report.update(
        {
            "l": market.qty(trade["qty"]),
            "L": market.price(trade["price"]),
            "n": market.qty(fee) if buyer else market.price(fee),
            "N": market.base if buyer else market.quote,
            "T": trade["time"],
            "t": trade["number"],  # the integer trade id of /api/v3/ (Trade.number)
            "m": maker,
            "Y": market.price(trade["quote_qty"]),  # Binance: last quote asset transacted quantity
        }
    )
    return report


def account_position(balances: list[tuple[str, int, Decimal, Decimal]], now_ms: int) -> dict:
    """``outboundAccountPosition``: ``(asset code, decimals, available, held)`` as ``a``, ``f`` (free), ``l`` (locked)."""
    return {
        "e": "outboundAccountPosition",
        "E": now_ms,
        "u": now_ms,
        "B": [
            {"a": code, "f": format_amount(available, decimals), "l": format_amount(held, decimals)}
            for code, decimals, available, held in balances
        ],
    }


def _ms(moment) -> int:
    return int(moment.timestamp() * 1000)


def kline(market: MarketInfo, candle, now_ms: int) -> dict:
    """``kline`` for a candle (:class:`apps.marketdata.selectors.Kline` from ``candles_latest``), Binance's fields:
    ``t``/``T`` open and close time, ``f``/``L`` its first and last trade id (-1 without trades, as Binance's
    ticker shows them), ``o``/``c``/``h``/``l`` prices,
    ``v``/``q`` base and quote volume, ``n`` trades, ``x`` true once it has closed, ``V``/``Q`` the taker
    buy base and quote volume, ``B`` Binance's unused field (``"0"``)."""
    close_ms = _ms(candle.close_time)
    return {
        "e": "kline",
        "E": now_ms,
        "s": market.event_symbol,
        "k": {
            "t": _ms(candle.open_time),
            "T": close_ms,
            "s": market.event_symbol,
            "i": candle.interval,
            "f": -1 if candle.first_trade is None else candle.first_trade,
            "L": -1 if candle.last_trade is None else candle.last_trade,
            "o": market.price(candle.open),
            "c": market.price(candle.close),
            "h": market.price(candle.high),
            "l": market.price(candle.low),
            "v": market.qty(candle.volume),
            "n": candle.trades,
            "x": close_ms < now_ms,
            "q": format_amount(candle.quote_volume, market.quote_decimals),
            "V": market.qty(candle.taker_buy_volume),
            "Q": format_amount(candle.taker_buy_quote_volume, market.quote_decimals),
            "B": "0",
        },
    }


def ticker_24h(market: MarketInfo, ticker, now_ms: int) -> dict:
    """``24hrTicker`` from :class:`apps.marketdata.selectors.Ticker`: ``p``/``P`` change and change %, ``w``
    the volume-weighted average price (rounded half-even), ``c`` last, ``o``/``h``/``l`` of the window, ``v``/``q`` base and
    quote volume, ``b``/``B``/``a``/``A`` the best bid and ask, ``O``/``C`` the window, ``n`` its trades,
    ``x`` the price of the last trade before the window, ``Q`` the last trade's quantity, ``F``/``L`` the
    window's first and last trade id.

    Missing figures (no trade in the window, an empty side, no trade before the window) are ``"0"``;
    ``F``/``L`` are -1 without trades in the window (Binance's).
    """
    zero = Decimal(0)

    def price(value):
        return market.price(value if value is not None else zero)

    def qty(value):
        return market.qty(value if value is not None else zero)

    weighted = ticker.quote_volume / ticker.volume if ticker.volume else zero
    return {
        "e": "24hrTicker",
        "E": now_ms,
        "s": market.event_symbol,
        "p": price(ticker.change),
        "P": f"{ticker.change_percent:.2f}" if ticker.change_percent is not None else "0.00",
        "w": price(weighted.quantize(Decimal(1).scaleb(-market.quote_decimals))),
        "x": price(ticker.prev_close),
        "c": price(ticker.last),
        "Q": qty(ticker.last_qty),
        "b": price(ticker.bid),
        "B": qty(ticker.bid_qty),
        "a": price(ticker.ask),
        "A": qty(ticker.ask_qty),
        "o": price(ticker.open),
        "h": price(ticker.high),
        "l": price(ticker.low),
        "v": qty(ticker.volume),
        "q": format_amount(ticker.quote_volume, market.quote_decimals),
        "O": _ms(ticker.open_time),
        "C": _ms(ticker.close_time),
        "F": -1 if ticker.first_trade is None else ticker.first_trade,
        "L": -1 if ticker.last_trade is None else ticker.last_trade,
        "n": ticker.trades,
    }


_MINI_TICKER_FIELDS = ("E", "s", "c", "o", "h", "l", "v", "q")


def mini_ticker(ticker: dict) -> dict:
    """``24hrMiniTicker`` of a :func:`ticker_24h` event: its time, symbol, last (``c``), open, high, low and base and
    quote volumes of the window (Binance's "Individual Symbol Mini Ticker Stream")."""
    return {"e": "24hrMiniTicker", **{key: ticker[key] for key in _MINI_TICKER_FIELDS}}
