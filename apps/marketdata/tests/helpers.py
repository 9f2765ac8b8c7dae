"""Helpers of the market data tests: fills and times to record candles with."""

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal


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
