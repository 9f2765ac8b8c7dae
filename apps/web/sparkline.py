"""A small price line for the markets list: the closes of the last 24 hourly candles as SVG polyline points.

Rendered on the server (no script): coordinates are pixels, computed with ``Decimal`` from the
exact closes and printed with one decimal place. An hour without a trade has no candle and no
point, so the line joins the hours that traded, each at its own place on the time axis.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from apps.marketdata.selectors import Kline

WIDTH, HEIGHT, PAD = 120, 32, 2
HOURS = 24
_ONE_PLACE = Decimal("0.1")


@dataclass(frozen=True)
class Sparkline:
    """``points`` for ``<polyline points="...">`` in a ``width`` x ``height`` box."""

    points: str
    width: int
    height: int


def sparkline(hourly: Sequence[Kline], *, start: datetime) -> Sparkline | None:
    """The line of ``hourly`` (1h candles, oldest first, opening at or after ``start``); ``None`` without any.

    x is the candle's hour since ``start`` (0 to 23, across the width), y its close between the
    lowest and highest close (a flat line across the middle when they are equal).
    """
    if not hourly:
        return None
    closes = [candle.close for candle in hourly]
    low, high = min(closes), max(closes)
    span = WIDTH - 2 * PAD
    inner = HEIGHT - 2 * PAD
    coordinates = []
    for candle in hourly:
        hour = Decimal((candle.open_time - start) // timedelta(hours=1))
        ratio = Decimal("0.5") if high == low else (candle.close - low) / (high - low)
        coordinates.append((PAD + span * hour / (HOURS - 1), PAD + inner * (1 - ratio)))
    if len(coordinates) == 1:  # one traded hour: a short flat stroke ending at it, so that something shows
        x, y = coordinates[0]
        coordinates.insert(0, (max(x - 4, Decimal(0)), y))
    points = [f"{x.quantize(_ONE_PLACE)},{y.quantize(_ONE_PLACE)}" for x, y in coordinates]
    return Sparkline(points=" ".join(points), width=WIDTH, height=HEIGHT)
