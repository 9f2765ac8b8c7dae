"""Candles (klines): per market and interval, what traded in each time bucket (issue 12).

A candle row exists only for a bucket with at least one trade (empty intervals are absent).
Rows are written only by :func:`apps.marketdata.services.candles_record`, in the fill
transaction of the placement whose trades they count, under the market's row lock: the
table always agrees with ``orders_trade`` (the migration that created it filled it from the
trades already there).
"""

from datetime import timedelta
from decimal import Decimal

from django.db import models
from django.db.models import F, Q

from apps.ledger.models import AmountField
from apps.orders.models import Market


class Interval(models.TextChoices):
    """Candle widths (Binance's names); buckets are aligned on the Unix epoch, in UTC."""

    M1 = "1m", "1 minute"
    M5 = "5m", "5 minutes"
    M15 = "15m", "15 minutes"
    H1 = "1h", "1 hour"
    H4 = "4h", "4 hours"
    D1 = "1d", "1 day"


INTERVAL_WIDTHS: dict[str, timedelta] = {
    Interval.M1: timedelta(minutes=1),
    Interval.M5: timedelta(minutes=5),
    Interval.M15: timedelta(minutes=15),
    Interval.H1: timedelta(hours=1),
    Interval.H4: timedelta(hours=4),
    Interval.D1: timedelta(days=1),
}


class Candle(models.Model):
    """What traded on ``market`` in ``[open_time, open_time + interval)``.

    ``open``/``close`` are the prices (quote per base) of the bucket's first and last trade
    (in matching order), ``high``/``low`` its extremes; ``volume`` is the base quantity,
    ``quote_volume`` the quote quantity (the sum of the trades' exact ``qty * price``),
    ``trades`` the number of trades; ``taker_buy_volume``/``taker_buy_quote_volume`` the base and
    quote quantity of the trades whose taker bought (Binance's kline ``V``/``Q``, "taker buy base/quote
    asset volume"). Every figure is an exact sum or copy of the trades'.
    The primary key (market, interval, open_time) is also the index the reads use.
    """

    pk = models.CompositePrimaryKey("market_id", "interval", "open_time")
    market = models.ForeignKey(Market, on_delete=models.PROTECT, related_name="+", db_index=False)
    interval = models.CharField(max_length=3, choices=Interval.choices)
    open_time = models.DateTimeField()
    open = AmountField()
    high = AmountField()
    low = AmountField()
    close = AmountField()
    volume = AmountField()
    quote_volume = AmountField()
    trades = models.PositiveBigIntegerField()
    # db_default: the set-based fill of migration 0001 names only the columns it had.
    taker_buy_volume = AmountField(db_default=Decimal(0))
    taker_buy_quote_volume = AmountField(db_default=Decimal(0))

    class Meta:
        ordering = ["market_id", "interval", "open_time"]
        constraints = [
            models.CheckConstraint(
                condition=Q(low__gt=0, open__gte=F("low"), close__gte=F("low"))
                & Q(open__lte=F("high"), close__lte=F("high")),
                name="candle_prices_within_high_low",
            ),
            models.CheckConstraint(
                condition=Q(volume__gt=0, quote_volume__gt=0, trades__gt=0), name="candle_not_empty"
            ),
            models.CheckConstraint(
                condition=Q(taker_buy_volume__gte=0, taker_buy_volume__lte=F("volume"))
                & Q(taker_buy_quote_volume__gte=0, taker_buy_quote_volume__lte=F("quote_volume")),
                name="candle_taker_buys_within_volume",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.market_id} {self.interval} {self.open_time:%Y-%m-%d %H:%M}"
