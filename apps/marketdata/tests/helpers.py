"""Helpers of the market data tests: fills and times to record candles with."""

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from apps.marketdata.services import candles_record


@dataclass(frozen=True)
class Fill:
    """What :func:`apps.marketdata.services.candles_record` reads of a fill."""

    price: Decimal
    qty: Decimal
    quote_qty: Decimal
    maker: "Maker"


@dataclass(frozen=True)
class Maker:
    """What :func:`apps.marketdata.services.candles_record` reads of a fill's resting order."""

    side: str


def fill(price: str, qty: str, *, maker_side: str = "sell") -> Fill:
    """A fill of ``qty`` base at ``price`` against a resting ``maker_side`` order (by default the taker bought);
    its quote quantity is the exact product."""
    return Fill(Decimal(price), Decimal(qty), Decimal(price) * Decimal(qty), Maker(maker_side))


def at(text: str) -> datetime:
    """``2026-12-01T12:00`` as an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def record_calendar(market_id: int) -> None:
    """Seven placements of one fill each from January to March 2026 (UTC), for the derived intervals:

    - Sat 01-31 22:10, 100 x 1 (the taker bought): January; the week opening Monday 01-26;
    - Sun 02-01 10:01, 110 x 2 (the taker sold): February; the same week;
    - Mon 02-02 10:00:05, 92 x 1 and 10:02:30, 90 x 1: one 3m bucket (10:00), two 1m ones; the week opening 02-02;
    - Mon 02-02 11:59:59, 95 x 1: 3m 11:57; with the two before, 2h 10:00 (two 1h buckets);
    - Mon 02-02 12:00, 97 x 0.5: 3m and 2h 12:00;
    - Tue 03-31 23:59:59.999999, 120 x 1: March's (31 days) last microsecond; the week opening 03-30.
    """
    for time, price, qty, maker_side in (
        ("2026-01-31T22:10", "100", "1", "sell"),
        ("2026-02-01T10:01", "110", "2", "buy"),
        ("2026-02-02T10:00:05", "92", "1", "sell"),
        ("2026-02-02T10:02:30", "90", "1", "sell"),
        ("2026-02-02T11:59:59", "95", "1", "sell"),
        ("2026-02-02T12:00", "97", "0.5", "sell"),
        ("2026-03-31T23:59:59.999999", "120", "1", "sell"),
    ):
        candles_record(market_id=market_id, time=at(time), fills=[fill(price, qty, maker_side=maker_side)])
