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


def fill(price: str, qty: str) -> Fill:
    """A fill of ``qty`` base at ``price``; its quote quantity is the exact product."""
    return Fill(Decimal(price), Decimal(qty), Decimal(price) * Decimal(qty))


def at(text: str) -> datetime:
    """``2026-12-01T12:00`` as an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)
