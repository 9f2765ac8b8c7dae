"""The only writes of market data: candles, kept in the fill transaction.

:func:`candles_record` runs when the orders app's placement announces its fills
(:data:`apps.orders.events.trades_executed`, :mod:`apps.marketdata.receivers`) after it has written the trades, in the same transaction and under the
market's row lock, so candles commit or roll back with the trades they count and two
placements on one market never update its candles at once.
"""

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Protocol

from apps.ledger.db import PreparedCursor, array_literal

# One statement per placement, whatever its number of fills: the fills are aggregated in SQL
# (exact NUMERIC sums; first and last price in matching order) and upserted into the bucket of
# every interval. All fills of a placement share its time, so they fall in one bucket per interval.
_UPSERT = """
    WITH f AS (
        SELECT * FROM unnest(%s::numeric[], %s::numeric[], %s::numeric[], %s::boolean[])
                      WITH ORDINALITY AS f(price, qty, quote_qty, taker_buy, n)
    ), a AS (
        SELECT (array_agg(price ORDER BY n))[1] AS open, max(price) AS high, min(price) AS low,
               (array_agg(price ORDER BY n DESC))[1] AS close, sum(qty) AS volume, sum(quote_qty) AS quote_volume,
               count(*) AS trades, COALESCE(sum(qty) FILTER (WHERE taker_buy), 0) AS taker_buy_volume,
               COALESCE(sum(quote_qty) FILTER (WHERE taker_buy), 0) AS taker_buy_quote_volume
        FROM f
    )
    INSERT INTO marketdata_candle AS c
        (market_id, interval, open_time, open, high, low, close, volume, quote_volume, trades,
         taker_buy_volume, taker_buy_quote_volume)
    SELECT %s, i.name, date_bin(i.width, %s::timestamptz, TIMESTAMPTZ '1970-01-01 00:00:00+00'),
           a.open, a.high, a.low, a.close, a.volume, a.quote_volume, a.trades, a.taker_buy_volume,
           a.taker_buy_quote_volume
    FROM a, (VALUES ('1m', INTERVAL '1 minute'), ('5m', INTERVAL '5 minutes'), ('15m', INTERVAL '15 minutes'),
                    ('1h', INTERVAL '1 hour'), ('4h', INTERVAL '4 hours'), ('1d', INTERVAL '1 day')) AS i(name, width)
    ON CONFLICT (market_id, interval, open_time) DO UPDATE SET
        high = GREATEST(c.high, EXCLUDED.high),
        low = LEAST(c.low, EXCLUDED.low),
        close = EXCLUDED.close,
        volume = c.volume + EXCLUDED.volume,
        quote_volume = c.quote_volume + EXCLUDED.quote_volume,
        trades = c.trades + EXCLUDED.trades,
        taker_buy_volume = c.taker_buy_volume + EXCLUDED.taker_buy_volume,
        taker_buy_quote_volume = c.taker_buy_quote_volume + EXCLUDED.taker_buy_quote_volume
"""


class Resting(Protocol):
    """What a candle needs of a fill's maker: its ``side`` (``"buy"`` or ``"sell"``)."""

    @property
    def side(self) -> str: ...


class Print(Protocol):
    """What a candle needs of a fill: ``price`` (quote per base), ``qty`` (base), ``quote_qty`` (quote) and its
    ``maker`` (the resting order: a fill against a resting ``"sell"`` is a taker buy)."""

    @property
    def price(self) -> Decimal: ...
    @property
    def qty(self) -> Decimal: ...
    @property
    def quote_qty(self) -> Decimal: ...
    @property
    def maker(self) -> Resting: ...


def candles_record(*, market_id: int, time: datetime, fills: Sequence[Print]) -> None:
    """Count a placement's fills, in matching order, all made at ``time``, into the market's candles.

    For each interval (1m, 5m, 15m, 1h, 4h, 1d) the bucket holding ``time`` (UTC, aligned on
    the epoch) is created with the fills' figures or updated: ``high``/``low`` widened,
    ``close`` set to the last fill's price, volumes and the trade count added. Exact:
    NUMERIC arithmetic on the fills' exact amounts. One statement; nothing when ``fills`` is
    empty. Call it inside the placement's transaction, under the market's row lock (placements
    of a market then count in commit order, so ``open`` stays the first trade's and ``close``
    the last's). A fill against a resting sell (the taker bought) also counts into ``taker_buy_volume``
    and ``taker_buy_quote_volume``. Raises nothing of its own; a database error aborts the placement with it.
    """
    statement = candles_statement(market_id=market_id, time=time, fills=fills)
    if statement is not None:
        with PreparedCursor() as cursor:
            cursor.execute(*statement)


def candles_statement(*, market_id: int, time: datetime, fills: Sequence[Print]) -> tuple[str, list] | None:
    """The one statement of :func:`candles_record` as ``(sql, parameters)``, for a caller that sends it with
    others in one round trip (:meth:`apps.ledger.db.PreparedCursor.pipeline`); ``None`` when there are no fills."""
    if not fills:
        return None
    return (
        _UPSERT,
        [
            array_literal(fill.price for fill in fills),
            array_literal(fill.qty for fill in fills),
            array_literal(fill.quote_qty for fill in fills),
            array_literal(fill.maker.side == "sell" for fill in fills),
            market_id,
            time,
        ],
    )
