"""Reads of market data: candles and 24-hour tickers.

Amounts are ``Decimal`` (prices in quote per base, ``volume`` in base, ``quote_volume`` in
quote); format them at the market's assets' precisions. Times are aware UTC datetimes.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from typing import NamedTuple

from django.utils import timezone

from apps.core.errors import DomainError, NotFound
from apps.ledger.db import PreparedCursor
from apps.orders.models import TRADE_NUMBER_BASE, Market

from .intervals import KLINE_INTERVALS, bucket_after_sql, bucket_ceil, bucket_open, bucket_shift, bucket_sql

MAX_CANDLES = 1000
DEFAULT_CANDLES = 500
TICKER_WINDOW = timedelta(hours=24)


class Kline(NamedTuple):
    """One candle as read: what traded in ``[open_time, open_time + interval)`` (see :class:`Candle`).

    ``open``/``close`` the first and last trade's price, ``high``/``low`` the extremes (quote per
    base); ``volume`` base, ``quote_volume`` quote, ``trades`` their number; ``taker_buy_volume`` (base)
    and ``taker_buy_quote_volume`` (quote) of the trades whose taker bought. ``first_trade`` and
    ``last_trade`` are the integer ids (``Trade.number``) of the candle's first and last trade, read
    only by :func:`candles_latest` (``None`` elsewhere). A named tuple: a thousand of them are built
    per read, and a tuple is built ten times faster than a frozen dataclass.
    """

    interval: str
    open_time: datetime
    open: Decimal
    high: Decimal
    low: Decimal
    close: Decimal
    volume: Decimal
    quote_volume: Decimal
    trades: int
    taker_buy_volume: Decimal = Decimal(0)
    taker_buy_quote_volume: Decimal = Decimal(0)
    first_trade: int | None = None
    last_trade: int | None = None

    @property
    def close_time(self) -> datetime:
        """The last instant inside the candle (the next bucket's open time - 1 µs: a month's varies), as Binance's
        klines give it."""
        return bucket_shift(self.interval, self.open_time, 1) - timedelta(microseconds=1)


# One statement for the market's id and its candles: a primary-key range (0.5 ms for 1,000 candles by
# EXPLAIN ANALYZE). What costs is turning rows into Python objects, so ``open_time`` comes as epoch
# microseconds (a timestamptz loads twenty times slower) and the amounts without NUMERIC(38, 18)'s
# trailing zeros (shorter texts to parse into Decimal; the same values).
_CANDLE_COLUMNS = """
    c.interval, (extract(epoch FROM c.open_time) * 1000000)::bigint, trim_scale(c.open), trim_scale(c.high),
    trim_scale(c.low), trim_scale(c.close), trim_scale(c.volume), trim_scale(c.quote_volume), c.trades,
    trim_scale(c.taker_buy_volume), trim_scale(c.taker_buy_quote_volume)
"""
_CANDLES = """
    SELECT {columns} FROM marketdata_candle c
    WHERE c.market_id = (SELECT id FROM orders_market WHERE symbol = %(market)s) AND c.interval = %(interval)s
      AND c.open_time >= COALESCE(%(start)s::timestamptz, '-infinity') AND c.open_time < COALESCE(%(end)s::timestamptz, 'infinity')
    ORDER BY c.open_time {order} LIMIT %(limit)s
"""
_CANDLES_FROM_START = _CANDLES.format(columns=_CANDLE_COLUMNS, order="ASC")
_CANDLES_TO_END = _CANDLES.format(columns=_CANDLE_COLUMNS, order="DESC")
# A derived interval's candles (:mod:`apps.marketdata.intervals`): its source interval's candles summed by bucket,
# open the first's and close the last's. The ``parts`` source candles nearest the window's edge (``limit`` times the
# most one bucket holds) are as many as the ``limit`` buckets nearest it can hold: only a bucket beyond them can be
# cut short, and with ``parts`` rows read there are more than ``limit`` buckets, so that one is left out.
_DERIVED = """
    WITH s AS (
        SELECT * FROM marketdata_candle c
        WHERE c.market_id = (SELECT id FROM orders_market WHERE symbol = %(market)s) AND c.interval = %(source)s
          AND c.open_time >= COALESCE(%(start)s::timestamptz, '-infinity') AND c.open_time < COALESCE(%(end)s::timestamptz, 'infinity')
        ORDER BY c.open_time {order} LIMIT %(parts)s
    ), c AS (
        SELECT %(interval)s::text AS interval, {bucket} AS open_time,
               (array_agg(s.open ORDER BY s.open_time))[1] AS open, max(s.high) AS high, min(s.low) AS low,
               (array_agg(s.close ORDER BY s.open_time DESC))[1] AS close, sum(s.volume) AS volume,
               sum(s.quote_volume) AS quote_volume, sum(s.trades)::bigint AS trades,
               sum(s.taker_buy_volume) AS taker_buy_volume, sum(s.taker_buy_quote_volume) AS taker_buy_quote_volume
        FROM s GROUP BY 2
    )
    SELECT {columns} FROM c ORDER BY c.open_time {order} LIMIT %(limit)s
""".replace("{bucket}", bucket_sql("s.open_time", "%(width)s::interval", "%(origin)s::timestamptz"))
_DERIVED_FROM_START = _DERIVED.format(columns=_CANDLE_COLUMNS, order="ASC")
_DERIVED_TO_END = _DERIVED.format(columns=_CANDLE_COLUMNS, order="DESC")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _klines(rows: list[tuple]) -> list[Kline]:
    """Rows of :data:`_CANDLE_COLUMNS` (and any columns after them) as :class:`Kline`."""
    epoch, us = _EPOCH, timedelta(microseconds=1)
    return [Kline(row[0], epoch + row[1] * us, *row[2:]) for row in rows]


def _check_query(interval: str, limit: int, start: datetime | None, end: datetime | None) -> None:
    if interval not in KLINE_INTERVALS:
        message = f"Must be one of {', '.join(KLINE_INTERVALS)}."
        raise DomainError(message, fields={"interval": message})
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_CANDLES:
        message = f"Must be a whole number from 1 to {MAX_CANDLES}."
        raise DomainError(message, fields={"limit": message})
    _check_window(start, end)


def _check_window(start: datetime | None, end: datetime | None) -> None:
    if start is not None and end is not None and end <= start:
        message = "Must be later than start."
        raise DomainError(message, fields={"end": message})


def candles(
    *,
    market: str,
    interval: str,
    start: datetime | None = None,
    end: datetime | None = None,
    limit: int = DEFAULT_CANDLES,
) -> list[Kline]:
    """The candles of ``market`` (symbol) for ``interval``, oldest first; buckets without trades are absent.

    ``interval`` is one of :data:`~apps.marketdata.intervals.KLINE_INTERVALS`: a stored one is read as stored, a
    derived one (3m, 30m, 2h, 6h, 8h, 12h, 3d, 1w, 1M) summed in SQL from its source interval's candles (exact
    NUMERIC sums; ``open`` the first source candle's, ``close`` the last's). ``start`` (inclusive) and ``end``
    (exclusive) bound the candles' ``open_time``. With a ``start``: the first ``limit`` candles from it; otherwise
    the last ``limit`` before ``end`` (or up to now). ``limit`` is 1..1000. One prepared statement: an index range
    scan of the candle table (its primary key), of at most ``limit`` candles (stored) or ``limit`` times as many
    as one bucket holds (derived: 31 days a month), whatever the number of trades; rows are read as tuples into
    :class:`Kline` (no model instances, no ORM). Raises :class:`NotFound` (market), :class:`DomainError`
    naming ``interval``, ``limit`` or ``end`` (not after ``start``).
    """
    _check_query(interval, limit, start, end)
    span = KLINE_INTERVALS[interval]
    params: dict[str, object] = {"market": market, "interval": interval, "start": start, "end": end, "limit": limit}
    if span.source == interval:
        statement = _CANDLES_FROM_START if start is not None else _CANDLES_TO_END
    else:  # the source candles of the buckets opening in [start, end)
        params |= {"source": span.source, "width": span.width, "origin": span.origin, "parts": limit * span.parts}
        params["start"] = None if start is None else bucket_ceil(interval, start)
        params["end"] = None if end is None else bucket_ceil(interval, end)
        statement = _DERIVED_FROM_START if start is not None else _DERIVED_TO_END
    with PreparedCursor() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    if not rows and not Market.objects.filter(symbol=market).exists():
        raise NotFound(f"No market {market}.", fields={"market": "No such market."})
    found = _klines(rows)
    return found if start is not None else found[::-1]


def candles_continuous(
    *,
    market: str,
    interval: str,
    start: datetime | None = None,
    end: datetime | None = None,
    limit: int = DEFAULT_CANDLES,
) -> list[Kline]:
    """:func:`candles` with no bucket missing from the market's first trade to now, as Binance's klines ("Kline
    always generate even if there is no trade", binance/binance-public-data#153).

    A bucket without trades is a flat candle at the close before it: ``open``, ``high``, ``low`` and ``close`` that
    price, volumes and ``trades`` 0. The buckets run up to the current one (still open) or the last opening before
    ``end``; none comes before the market's first candle. With ``start``: the first ``limit`` buckets opening at or
    after it; otherwise the last ``limit``. Buckets of ``1M`` are calendar months (28 to 31 days). At most three
    reads of the candle table's primary key (the candle before the window, the first one after ``start`` when there
    is none before, the window). Raises as :func:`candles`.
    """
    _check_query(interval, limit, start, end)
    now = timezone.now()
    last = bucket_open(interval, now if end is None else min(now, end - timedelta(microseconds=1)))
    if start is None:
        first = bucket_shift(interval, last, 1 - limit)
    elif start > last:  # no bucket opens in the window (and none is computed near the year 9999)
        first = bucket_shift(interval, last, 1)
    else:
        first = bucket_ceil(interval, start)
    before = candles(market=market, interval=interval, end=first, limit=1)
    if end is not None and end <= first:
        return []
    if not before and start is not None:  # nothing before start: the window opens at the market's first candle
        head = candles(market=market, interval=interval, start=first, end=end, limit=1)
        first = head[0].open_time if head else bucket_shift(interval, last, 1)
    if start is not None:
        last = min(last, bucket_shift(interval, first, limit - 1))
    if first > last:
        return []
    after = bucket_shift(interval, last, 1)
    stored = {k.open_time: k for k in candles(market=market, interval=interval, start=first, end=after, limit=limit)}
    close = before[0].close if before else None
    filled: list[Kline] = []
    moment = first
    while moment <= last:
        kline = stored.get(moment)
        if kline is not None:
            close = kline.close
            filled.append(kline)
        elif close is not None:
            filled.append(_flat(interval, moment, close))
        moment = bucket_shift(interval, moment, 1)
    return filled


def _flat(interval: str, open_time: datetime, close: Decimal) -> Kline:
    """The candle of a bucket without trades: open, high, low and close the ``close`` before it, volumes and trades 0."""
    zero = Decimal(0)
    return Kline(interval, open_time, close, close, close, close, zero, zero, 0)


def candles_live(latest: Kline, since: datetime | None, now: datetime) -> list[Kline]:
    """The candles of ``latest``'s interval a live ``kline_<interval>`` stream pushes at ``now``, oldest first.

    ``latest`` is the newest stored candle of the interval (:func:`candles_latest`); ``since`` the open time of the
    bucket the previous push ended with (``None``: none yet). When ``now`` has left ``since``'s bucket, that bucket
    comes first, in its final state (closed: Binance's ``x``), unless a newer stored candle superseded it; then the
    bucket holding ``now``. Each is ``latest`` when it is that bucket's candle, otherwise a flat candle at
    ``latest``'s close (no trade since it), as :func:`candles_continuous` fills a bucket without trades: Binance
    pushes the current kline every 2 s, trades or not. No database; raises nothing.
    """
    current = bucket_open(latest.interval, now)
    due = [since, current] if since is not None and since < current else [current]
    return [
        latest if open_time == latest.open_time else _flat(latest.interval, open_time, latest.close)
        for open_time in due
        if open_time >= latest.open_time
    ]


# The newest candle of every interval and the integer ids of its first and last trade: the bucket holding the newest
# candle of the interval's source (itself when stored), its source candles summed as :func:`candles` sums them, and
# the trades of the bucket by time (index trade_market_time), first and last in matching order.
_LATEST = """
    SELECT {columns}, first.number, last.number
    FROM (VALUES {intervals}) AS i(name, source, width, origin, rank)
    CROSS JOIN LATERAL (
        SELECT {bucket} AS open_time FROM marketdata_candle c WHERE c.market_id = %(market)s AND c.interval = i.source
        ORDER BY c.open_time DESC LIMIT 1
    ) AS newest
    CROSS JOIN LATERAL (SELECT newest.open_time, {after} AS close_after) AS b
    CROSS JOIN LATERAL (
        SELECT i.name AS interval, b.open_time, (array_agg(s.open ORDER BY s.open_time))[1] AS open,
               max(s.high) AS high, min(s.low) AS low, (array_agg(s.close ORDER BY s.open_time DESC))[1] AS close,
               sum(s.volume) AS volume, sum(s.quote_volume) AS quote_volume, sum(s.trades)::bigint AS trades,
               sum(s.taker_buy_volume) AS taker_buy_volume, sum(s.taker_buy_quote_volume) AS taker_buy_quote_volume
        FROM marketdata_candle s
        WHERE s.market_id = %(market)s AND s.interval = i.source AND s.open_time >= b.open_time
          AND s.open_time < b.close_after
    ) AS c
    LEFT JOIN LATERAL (
        SELECT t.taker_order_id * %(base)s::bigint + t.seq AS number FROM orders_trade t
        WHERE t.market_id = %(market)s AND t.created_at >= b.open_time AND t.created_at < b.close_after
        ORDER BY t.created_at, t.taker_order_id, t.seq LIMIT 1
    ) AS first ON true
    LEFT JOIN LATERAL (
        SELECT t.taker_order_id * %(base)s::bigint + t.seq AS number FROM orders_trade t
        WHERE t.market_id = %(market)s AND t.created_at >= b.open_time AND t.created_at < b.close_after
        ORDER BY t.created_at DESC, t.taker_order_id DESC, t.seq DESC LIMIT 1
    ) AS last ON true
    ORDER BY i.rank
""".format(
    columns=_CANDLE_COLUMNS,
    intervals=", ".join(
        f"('{name}', '{span.source}', "
        + ("NULL::interval" if span.width is None else f"INTERVAL '{span.width.total_seconds():.0f} seconds'")
        + f", TIMESTAMPTZ '{span.origin.isoformat()}', {rank})"
        for rank, (name, span) in enumerate(KLINE_INTERVALS.items())
    ),
    bucket=bucket_sql("c.open_time", "i.width", "i.origin"),
    after=bucket_after_sql("newest.open_time", "i.width"),
)


def candles_latest(*, market_id: int) -> list[Kline]:
    """The newest candle of each interval of the market (by id), in the order of
    :data:`~apps.marketdata.intervals.KLINE_INTERVALS` (1m first), with its ``first_trade`` and ``last_trade``.

    What the ``kline_<interval>`` streams publish (Binance's ``f``/``L``); an interval without a candle is
    absent. A derived interval's is the bucket holding its source interval's newest candle, summed as
    :func:`candles` sums it. One statement: per interval a primary-key probe, a primary-key range of at most 31
    candles and two probes of the trades' time index. Raises nothing of its own.
    """
    with PreparedCursor() as cursor:
        cursor.execute(_LATEST, {"market": market_id, "base": TRADE_NUMBER_BASE})
        return _klines(cursor.fetchall())


@dataclass(frozen=True)
class Ticker:
    """A market's figures over the rolling window ``[open_time, close_time]`` (24 hours up to ``close_time``).

    ``last`` is the price of the last trade at or before ``close_time`` (even older than the
    window; ``None`` when the market never traded). ``open``, ``high``, ``low`` are of the
    trades inside the window (``None`` when there were none); ``change = last - open``,
    ``change_percent = change / open * 100`` rounded half-even to 2 places (``None`` without
    trades in the window). ``volume`` (base), ``quote_volume`` (quote) and ``trades`` count the
    window's trades exactly. ``bid``/``ask`` are the best resting prices and ``bid_qty``/
    ``ask_qty`` the base quantity resting at them, as of the read (``None`` on an empty side).
    ``last_qty`` is the base quantity of the last trade (``None`` with ``last``); ``prev_close`` the price
    of the last trade before the window (Binance's ``x``/``prevClosePrice``, ``None`` when there was none);
    ``first_trade``/``last_trade`` the integer ids (``Trade.number``) of the window's first and last trade
    (``None`` without trades in the window; Binance shows -1).
    """

    market: Market
    open_time: datetime
    close_time: datetime
    last: Decimal | None
    open: Decimal | None
    high: Decimal | None
    low: Decimal | None
    volume: Decimal
    quote_volume: Decimal
    trades: int
    bid: Decimal | None
    bid_qty: Decimal | None
    ask: Decimal | None
    ask_qty: Decimal | None
    last_qty: Decimal | None
    prev_close: Decimal | None
    first_trade: int | None
    last_trade: int | None

    @property
    def symbol(self) -> str:
        return self.market.symbol

    @property
    def change(self) -> Decimal | None:
        if self.open is None or self.last is None:
            return None
        return self.last - self.open

    @property
    def change_percent(self) -> Decimal | None:
        if self.change is None or self.open is None:
            return None
        with localcontext(prec=80):
            return (self.change * 100 / self.open).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)


# The window [t0, t1] in five parts, so that every trade is counted once and exactly: the trades of
# the partial minute at its start ([t0, m0), m0 = t0 rounded up to a minute), the 1m candles up to the
# first whole hour ([m0, h0), h0 = m0 rounded up to an hour), the 1h candles of the whole hours
# [h0, h1), the 1m candles after the last ([h1, m1), h1 = m1 rounded down to an hour), and the trades
# of the partial minute at its end ([m1, t1], m1 = t1 rounded down to a minute). At most two minutes of
# trades (index trade_market_time) and about 140 candles (their primary key) instead of 1,440. (The
# parts are disjoint because the window spans more than two hours: h0 <= h1.)
_TICKERS = """
    WITH minute_edges AS (
        SELECT t0, t1, date_bin('1 minute', t0, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS t0_minute,
               date_bin('1 minute', t1, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS m1
        FROM (SELECT %s::timestamptz - %s::interval AS t0, %s::timestamptz AS t1) AS bounds
    ), minutes AS (
        SELECT t0, t1, m1, t0_minute + CASE WHEN t0_minute = t0 THEN INTERVAL '0' ELSE INTERVAL '1 minute' END AS m0
        FROM minute_edges
    ), w AS (
        SELECT t0, t1, m0, m1, date_bin('1 hour', m1, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS h1,
               date_bin('1 hour', m0, TIMESTAMPTZ '1970-01-01 00:00:00+00')
               + CASE WHEN date_bin('1 hour', m0, TIMESTAMPTZ '1970-01-01 00:00:00+00') = m0
                      THEN INTERVAL '0' ELSE INTERVAL '1 hour' END AS h0
        FROM minutes
    )
    SELECT m.id, agg.open, agg.high, agg.low, COALESCE(agg.volume, 0), COALESCE(agg.quote_volume, 0),
           COALESCE(agg.trades, 0), last.price, bid.price, bid.qty, ask.price, ask.qty, last.qty, prev.price,
           first.number, CASE WHEN last.created_at >= w.t0 THEN last.number END
    FROM orders_market m CROSS JOIN w
    CROSS JOIN LATERAL (
        SELECT (array_agg(p.open ORDER BY p.at, p.taker_order_id, p.seq))[1] AS open, max(p.high) AS high,
               min(p.low) AS low,
               (array_agg(p.close ORDER BY p.at DESC, p.taker_order_id DESC, p.seq DESC))[1] AS close,
               sum(p.volume) AS volume, sum(p.quote_volume) AS quote_volume, sum(p.trades) AS trades
        FROM (
            SELECT t.created_at AS at, t.taker_order_id, t.seq, t.price AS open, t.price AS high, t.price AS low,
                   t.price AS close, t.qty AS volume, t.quote_qty AS quote_volume, 1 AS trades
            FROM orders_trade t
            WHERE t.market_id = m.id AND ((t.created_at >= w.t0 AND t.created_at < w.m0)
                                          OR (t.created_at >= w.m1 AND t.created_at <= w.t1))
            UNION ALL
            SELECT c.open_time, 0, 0, c.open, c.high, c.low, c.close, c.volume, c.quote_volume, c.trades
            FROM marketdata_candle c
            WHERE c.market_id = m.id AND c.interval = '1m' AND ((c.open_time >= w.m0 AND c.open_time < w.h0)
                                                                OR (c.open_time >= w.h1 AND c.open_time < w.m1))
            UNION ALL
            SELECT c.open_time, 0, 0, c.open, c.high, c.low, c.close, c.volume, c.quote_volume, c.trades
            FROM marketdata_candle c
            WHERE c.market_id = m.id AND c.interval = '1h' AND c.open_time >= w.h0 AND c.open_time < w.h1
        ) AS p
    ) AS agg
    LEFT JOIN LATERAL (
        SELECT t.price, t.qty, t.created_at, t.taker_order_id * %s::bigint + t.seq AS number
        FROM orders_trade t WHERE t.market_id = m.id AND t.created_at <= w.t1
        ORDER BY t.created_at DESC, t.taker_order_id DESC, t.seq DESC LIMIT 1
    ) AS last ON true
    LEFT JOIN LATERAL (
        SELECT t.taker_order_id * %s::bigint + t.seq AS number
        FROM orders_trade t WHERE t.market_id = m.id AND t.created_at >= w.t0 AND t.created_at <= w.t1
        ORDER BY t.created_at, t.taker_order_id, t.seq LIMIT 1
    ) AS first ON true
    LEFT JOIN LATERAL (
        SELECT t.price FROM orders_trade t WHERE t.market_id = m.id AND t.created_at < w.t0
        ORDER BY t.created_at DESC, t.taker_order_id DESC, t.seq DESC LIMIT 1
    ) AS prev ON true
    LEFT JOIN LATERAL (
        SELECT o.price, sum(o.qty - o.filled_qty) AS qty FROM orders_order o
        WHERE o.market_id = m.id AND o.side = 'buy' AND o.status IN ('open', 'partially_filled')
        GROUP BY o.price ORDER BY o.price DESC LIMIT 1
    ) AS bid ON true
    LEFT JOIN LATERAL (
        SELECT o.price, sum(o.qty - o.filled_qty) AS qty FROM orders_order o
        WHERE o.market_id = m.id AND o.side = 'sell' AND o.status IN ('open', 'partially_filled')
        GROUP BY o.price ORDER BY o.price LIMIT 1
    ) AS ask ON true
    WHERE m.id = ANY(%s::bigint[])
"""


def _tickers(markets: list[Market], now: datetime | None) -> list[Ticker]:
    now = now or timezone.now()
    with PreparedCursor() as cursor:  # planned once per connection: the statement is long, its run short
        cursor.execute(
            _TICKERS,
            [now, TICKER_WINDOW, now, TRADE_NUMBER_BASE, TRADE_NUMBER_BASE, [market.id for market in markets]],
        )
        rows = {row[0]: row[1:] for row in cursor.fetchall()}
    tickers = []
    for market in markets:
        open_, high, low, volume, quote_volume, trades, last, bid, bid_qty, ask, ask_qty, *trade_figures = rows[
            market.id
        ]
        last_qty, prev_close, first_trade, last_trade = trade_figures
        tickers.append(
            Ticker(
                market=market,
                open_time=now - TICKER_WINDOW,
                close_time=now,
                last=last,
                open=open_,
                high=high,
                low=low,
                volume=volume,
                quote_volume=quote_volume,
                trades=int(trades),
                bid=bid,
                bid_qty=bid_qty,
                ask=ask,
                ask_qty=ask_qty,
                last_qty=last_qty,
                prev_close=prev_close,
                first_trade=first_trade,
                last_trade=last_trade,
            )
        )
    return tickers


def ticker_24h(*, market: str, now: datetime | None = None) -> Ticker:
    """The 24-hour ticker of ``market`` (symbol) for the window ending at ``now`` (default: the current time).

    One statement. Raises :class:`NotFound` for an unknown market.
    """
    found = Market.objects.select_related("base", "quote").filter(symbol=market).first()
    if found is None:
        raise NotFound(f"No market {market}.", fields={"market": "No such market."})
    return _tickers([found], now)[0]


def tickers_24h(*, now: datetime | None = None) -> list[Ticker]:
    """The 24-hour ticker of every market, by symbol, all for the same window ending at ``now``; one statement."""
    return _tickers(list(Market.objects.select_related("base", "quote").order_by("symbol")), now)
