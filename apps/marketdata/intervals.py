"""Kline intervals: Binance's fifteen, the six stored and the nine derived from them when read.

Only the intervals of :class:`~apps.marketdata.models.Interval` are stored (one row per bucket with trades,
written in the fill's transaction); the others (3m, 30m, 2h, 6h, 8h, 12h, 3d, 1w, 1M) are summed when read
from the finest stored interval that divides them, so the matching engine writes no more rows. Buckets are
UTC, as Binance's: aligned on the Unix epoch, except ``1w`` (opening on Mondays, 00:00) and ``1M`` (opening on
the first day of each calendar month, so its width varies from 28 to 31 days). Times are aware UTC datetimes.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .models import INTERVAL_WIDTHS, Interval

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MONDAY = datetime(1970, 1, 5, tzinfo=UTC)  # the first Monday after the epoch: where weeks open
FIRST_TIME = datetime.min.replace(tzinfo=UTC)
LAST_TIME = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Span:
    """How an interval's buckets are cut: ``source`` is the stored interval its candles are read from (itself
    when stored), ``width`` its fixed width (``None``: a calendar month), ``origin`` an instant where one of its
    buckets opens."""

    source: str
    width: timedelta | None
    origin: datetime = _EPOCH

    @property
    def parts(self) -> int:
        """The most ``source`` candles one bucket holds (31 days in a month)."""
        return 31 if self.width is None else self.width // INTERVAL_WIDTHS[self.source]


def _derived(source: Interval, width: timedelta | None, origin: datetime = _EPOCH) -> Span:
    return Span(source.value, width, origin)


def _stored(interval: Interval) -> Span:
    return Span(interval.value, INTERVAL_WIDTHS[interval])


# Binance's intervals in Binance's order (its "Kline/Candlestick chart intervals"), but for 1s: not served.
KLINE_INTERVALS: dict[str, Span] = {
    "1m": _stored(Interval.M1),
    "3m": _derived(Interval.M1, timedelta(minutes=3)),
    "5m": _stored(Interval.M5),
    "15m": _stored(Interval.M15),
    "30m": _derived(Interval.M15, timedelta(minutes=30)),
    "1h": _stored(Interval.H1),
    "2h": _derived(Interval.H1, timedelta(hours=2)),
    "4h": _stored(Interval.H4),
    "6h": _derived(Interval.H1, timedelta(hours=6)),
    "8h": _derived(Interval.H4, timedelta(hours=8)),
    "12h": _derived(Interval.H4, timedelta(hours=12)),
    "1d": _stored(Interval.D1),
    "3d": _derived(Interval.D1, timedelta(days=3)),
    "1w": _derived(Interval.D1, timedelta(weeks=1), _MONDAY),
    "1M": _derived(Interval.D1, None),
}


def bucket_open(interval: str, moment: datetime) -> datetime:
    """The open time of the bucket of ``interval`` that holds ``moment`` (aware). Raises ``KeyError`` for an
    interval not in :data:`KLINE_INTERVALS`, ``OverflowError`` beyond datetime's range (years 1 to 9999)."""
    span = KLINE_INTERVALS[interval]
    if span.width is None:
        return moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return span.origin + (moment - span.origin) // span.width * span.width


def bucket_shift(interval: str, open_time: datetime, buckets: int) -> datetime:
    """The open time of the bucket ``buckets`` after the one opening at ``open_time`` (before it when negative).
    Raises ``OverflowError`` beyond datetime's range."""
    span = KLINE_INTERVALS[interval]
    if span.width is not None:
        return open_time + buckets * span.width
    months = open_time.year * 12 + open_time.month - 1 + buckets
    if not 1 <= months // 12 <= 9999:
        raise OverflowError("date value out of range")
    return open_time.replace(year=months // 12, month=months % 12 + 1)


def bucket_ceil(interval: str, moment: datetime) -> datetime:
    """The open time of the first bucket of ``interval`` opening at or after ``moment``; beyond datetime's range,
    its end on that side (:data:`FIRST_TIME` or :data:`LAST_TIME`), which bounds a query as well."""
    try:
        opened = bucket_open(interval, moment)
        return moment if opened == moment else bucket_shift(interval, opened, 1)
    except OverflowError:
        return FIRST_TIME if moment < _EPOCH else LAST_TIME


def bucket_sql(column: str, width: str, origin: str) -> str:
    """SQL of the open time of the bucket holding the timestamptz ``column``, for the SQL expressions ``width``
    (an interval; NULL: a calendar month) and ``origin`` (a timestamptz where a bucket opens): PostgreSQL's
    ``date_bin``, or the month's first day in UTC."""
    return (
        f"CASE WHEN {width} IS NULL THEN date_trunc('month', {column} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' "
        f"ELSE date_bin({width}, {column}, {origin}) END"
    )


def bucket_after_sql(open_time: str, width: str) -> str:
    """SQL of the open time of the bucket after the one opening at ``open_time`` (as :func:`bucket_sql`'s)."""
    return (
        f"CASE WHEN {width} IS NULL THEN ({open_time} AT TIME ZONE 'UTC' + INTERVAL '1 month') AT TIME ZONE 'UTC' "
        f"ELSE {open_time} + {width} END"
    )
