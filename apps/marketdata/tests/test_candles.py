"""Candles: exact figures from known trades, interval boundaries, empty intervals absent, the selector's window."""

import importlib
from collections import defaultdict
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.utils import timezone

from apps.core.errors import DomainError, NotFound
from apps.ledger.tests.factories import UserFactory, fund
from apps.marketdata.intervals import KLINE_INTERVALS, bucket_open
from apps.marketdata.models import Candle, Interval
from apps.marketdata.selectors import Kline, candles, candles_continuous, candles_latest, candles_live
from apps.marketdata.services import candles_record
from apps.marketdata.tests.helpers import at, fill, record_calendar
from apps.orders.models import Trade
from apps.orders.tests.helpers import place

D = Decimal


def figures(candle: Kline | Candle) -> tuple:
    return (
        candle.open_time,
        candle.open,
        candle.high,
        candle.low,
        candle.close,
        candle.volume,
        candle.quote_volume,
        candle.trades,
    )


def all_figures(candle: Kline | Candle) -> tuple:
    return (*figures(candle), candle.taker_buy_volume, candle.taker_buy_quote_volume)


@pytest.fixture
def boundary_trades(btc_usdt):
    """Four placements on both sides of 12:00 and 12:05 UTC; the second fills twice (two price levels)."""
    candles_record(market_id=btc_usdt.id, time=at("2026-12-01T11:59:59.999999"), fills=[fill("60000.00", "0.1000")])
    candles_record(
        market_id=btc_usdt.id,
        time=at("2026-12-01T12:00:00"),
        fills=[fill("60010.00", "0.0500"), fill("60020.50", "0.0250")],
    )
    candles_record(market_id=btc_usdt.id, time=at("2026-12-01T12:04:59.999999"), fills=[fill("59990.01", "0.0001")])
    candles_record(market_id=btc_usdt.id, time=at("2026-12-01T12:05:00"), fills=[fill("60005.00", "1.0000")])
    return btc_usdt


def test_interval_boundaries_and_empty_minutes_absent(boundary_trades):
    one_minute = candles(market="BTC-USDT", interval="1m")

    assert [figures(c) for c in one_minute] == [
        (at("2026-12-01T11:59"), D("60000"), D("60000"), D("60000"), D("60000"), D("0.1"), D("6000"), 1),
        (at("2026-12-01T12:00"), D("60010"), D("60020.5"), D("60010"), D("60020.5"), D("0.075"), D("4501.0125"), 2),
        (
            at("2026-12-01T12:04"),
            D("59990.01"),
            D("59990.01"),
            D("59990.01"),
            D("59990.01"),
            D("0.0001"),
            D("5.999001"),
            1,
        ),
        (at("2026-12-01T12:05"), D("60005"), D("60005"), D("60005"), D("60005"), D("1"), D("60005"), 1),
    ]  # 12:01 to 12:03 had no trade: no candle
    assert one_minute[0].close_time == at("2026-12-01T11:59:59.999999")


def test_continuous_candles_fill_the_minutes_without_trades_at_the_close_before(boundary_trades):
    """Binance's klines have every bucket: a minute without trades is flat at the previous close, with no volume."""

    def flat(time: str, price: str) -> tuple:
        return (at(time), D(price), D(price), D(price), D(price), D(0), D(0), 0)

    stored = {c.open_time: figures(c) for c in candles(market="BTC-USDT", interval="1m")}
    from_start = candles_continuous(market="BTC-USDT", interval="1m", start=at("2026-12-01T11:00"), limit=8)
    assert [figures(c) for c in from_start] == [
        stored[at("2026-12-01T11:59")],  # the first trade: nothing before it, so the window opens here
        stored[at("2026-12-01T12:00")],
        flat("2026-12-01T12:01", "60020.5"),
        flat("2026-12-01T12:02", "60020.5"),
        flat("2026-12-01T12:03", "60020.5"),
        stored[at("2026-12-01T12:04")],
        stored[at("2026-12-01T12:05")],
        flat("2026-12-01T12:06", "60005"),
    ]
    to_end = candles_continuous(market="BTC-USDT", interval="1m", end=at("2026-12-01T12:03:30"), limit=3)
    assert [figures(c) for c in to_end] == [
        flat("2026-12-01T12:01", "60020.5"),
        flat("2026-12-01T12:02", "60020.5"),
        flat("2026-12-01T12:03", "60020.5"),  # opens before the end: in
    ]
    five = candles_continuous(market="BTC-USDT", interval="5m", start=at("2026-12-01T11:56"), limit=3)
    assert [c.open_time for c in five] == [at("2026-12-01T12:00"), at("2026-12-01T12:05"), at("2026-12-01T12:10")]
    assert figures(five[2]) == flat("2026-12-01T12:10", "60005")


def test_continuous_candles_run_up_to_the_current_bucket_and_never_before_the_first_trade(boundary_trades):
    latest = candles_continuous(market="BTC-USDT", interval="1h", limit=3)
    now = timezone.now()
    assert [c.open_time for c in latest] == [latest[0].open_time + n * timedelta(hours=1) for n in range(3)]
    assert latest[-1].open_time <= now < latest[-1].open_time + timedelta(hours=2)  # the current hour (or the last)
    assert {(c.close, c.volume, c.trades) for c in latest} == {(D("60005"), D(0), 0)}
    assert candles_continuous(market="BTC-USDT", interval="1m", end=at("2026-12-01T11:59")) == []
    assert candles_continuous(market="BTC-USDT", interval="1m", start=at("2026-12-01T12:06:30")) != []
    within_a_minute = {"start": at("2026-12-01T12:00:10"), "end": at("2026-12-01T12:00:50")}
    assert candles_continuous(market="BTC-USDT", interval="1m", **within_a_minute) == []  # no bucket opens in it
    with pytest.raises(NotFound):
        candles_continuous(market="NOPE-USDT", interval="1m")
    with pytest.raises(DomainError, match="Must be one of"):
        candles_continuous(market="BTC-USDT", interval="2m")


def test_wider_intervals_add_up_exactly(boundary_trades):
    five = [figures(c) for c in candles(market="BTC-USDT", interval="5m")]
    fifteen = [figures(c) for c in candles(market="BTC-USDT", interval="15m")]
    day = [figures(c) for c in candles(market="BTC-USDT", interval="1d")]

    assert five == [
        (at("2026-12-01T11:55"), D("60000"), D("60000"), D("60000"), D("60000"), D("0.1"), D("6000"), 1),
        (
            at("2026-12-01T12:00"),
            D("60010"),
            D("60020.5"),
            D("59990.01"),
            D("59990.01"),
            D("0.0751"),
            D("4507.011501"),
            3,
        ),
        (at("2026-12-01T12:05"), D("60005"), D("60005"), D("60005"), D("60005"), D("1"), D("60005"), 1),
    ]
    assert fifteen == [
        (at("2026-12-01T11:45"), D("60000"), D("60000"), D("60000"), D("60000"), D("0.1"), D("6000"), 1),
        (
            at("2026-12-01T12:00"),
            D("60010"),
            D("60020.5"),
            D("59990.01"),
            D("60005"),
            D("1.0751"),
            D("64512.011501"),
            4,
        ),
    ]
    assert [c[0] for c in (figures(c) for c in candles(market="BTC-USDT", interval="1h"))] == [
        at("2026-12-01T11:00"),
        at("2026-12-01T12:00"),
    ]
    assert [c[0] for c in (figures(c) for c in candles(market="BTC-USDT", interval="4h"))] == [
        at("2026-12-01T08:00"),
        at("2026-12-01T12:00"),
    ]
    assert day == [
        (at("2026-12-01T00:00"), D("60000"), D("60020.5"), D("59990.01"), D("60005"), D("1.1751"), D("70512.011501"), 5)
    ]


def test_window_and_limit(boundary_trades):
    def times(**kwargs):
        return [c.open_time.strftime("%H:%M") for c in candles(market="BTC-USDT", interval="1m", **kwargs)]

    assert times(limit=2) == ["12:04", "12:05"]  # the latest, oldest first
    assert times(start=at("2026-12-01T12:00"), limit=2) == ["12:00", "12:04"]
    assert times(start=at("2026-12-01T12:00"), end=at("2026-12-01T12:05")) == ["12:00", "12:04"]  # end exclusive
    assert times(end=at("2026-12-01T12:00")) == ["11:59"]


@pytest.fixture
def calendar(btc_usdt):
    """:func:`~apps.marketdata.tests.helpers.record_calendar`'s placements, January to March 2026."""
    record_calendar(btc_usdt.id)
    return btc_usdt


def test_derived_intervals_sum_their_source_candles_into_binance_buckets(calendar):
    """Binance's 3m (from 1m), 2h (from 1h), 1w (from 1d, opening on Mondays) and 1M (from 1d, calendar months):
    open the first source candle's, close the last's, high and low the extremes, volumes and trades summed."""

    def rows(interval: str) -> list[tuple]:
        return [all_figures(c) for c in candles(market="BTC-USDT", interval=interval)]

    def one(time: str, price: str, qty: str, taker_bought: bool = True) -> tuple:
        quote = D(price) * D(qty)
        bought = (D(qty), quote) if taker_bought else (D(0), D(0))
        return (at(time), D(price), D(price), D(price), D(price), D(qty), quote, 1, *bought)

    assert rows("3m") == [
        one("2026-01-31T22:09", "100", "1"),
        one("2026-02-01T10:00", "110", "2", taker_bought=False),
        (at("2026-02-02T10:00"), D(92), D(92), D(90), D(90), D(2), D(182), 2, D(2), D(182)),  # 10:00 and 10:02
        one("2026-02-02T11:57", "95", "1"),
        one("2026-02-02T12:00", "97", "0.5"),
        one("2026-03-31T23:57", "120", "1"),
    ]
    assert rows("2h") == [
        one("2026-01-31T22:00", "100", "1"),
        one("2026-02-01T10:00", "110", "2", taker_bought=False),
        (at("2026-02-02T10:00"), D(92), D(95), D(90), D(95), D(3), D(277), 3, D(3), D(277)),  # 10:00 and 11:00
        one("2026-02-02T12:00", "97", "0.5"),
        one("2026-03-31T22:00", "120", "1"),
    ]
    assert rows("1w") == [
        (at("2026-01-26"), D(100), D(110), D(100), D(110), D(3), D(320), 2, D(1), D(100)),  # Saturday and Sunday
        (at("2026-02-02"), D(92), D(97), D(90), D(97), D("3.5"), D("325.5"), 4, D("3.5"), D("325.5")),
        one("2026-03-30", "120", "1"),
    ]
    assert rows("1M") == [
        one("2026-01-01", "100", "1"),
        (at("2026-02-01"), D(110), D(110), D(90), D(97), D("5.5"), D("545.5"), 5, D("3.5"), D("325.5")),
        one("2026-03-01", "120", "1"),  # its last microsecond is March's
    ]
    months = candles(market="BTC-USDT", interval="1M")
    assert [c.close_time for c in months] == [
        at("2026-01-31T23:59:59.999999"),
        at("2026-02-28T23:59:59.999999"),
        at("2026-03-31T23:59:59.999999"),
    ]
    weeks = candles(market="BTC-USDT", interval="1w")
    assert {c.open_time.weekday() for c in weeks} == {0}  # Mondays
    assert weeks[0].close_time == at("2026-02-01T23:59:59.999999")
    assert not Candle.objects.exclude(interval__in=Interval.values).exists()  # read, never stored


@pytest.mark.parametrize("interval", [name for name, span in KLINE_INTERVALS.items() if span.source != name])
def test_every_derived_interval_is_its_one_minute_candles_summed_by_bucket(calendar, interval):
    """The SQL's buckets (date_bin, date_trunc) are the Python ones gap filling and the streams count on."""
    by_bucket = defaultdict(list)
    for minute in candles(market="BTC-USDT", interval="1m"):
        by_bucket[bucket_open(interval, minute.open_time)].append(minute)
    expected = [
        (
            open_time,
            parts[0].open,
            max(c.high for c in parts),
            min(c.low for c in parts),
            parts[-1].close,
            sum(c.volume for c in parts),
            sum(c.quote_volume for c in parts),
            sum(c.trades for c in parts),
            sum(c.taker_buy_volume for c in parts),
            sum(c.taker_buy_quote_volume for c in parts),
        )
        for open_time, parts in sorted(by_bucket.items())
    ]

    assert [all_figures(c) for c in candles(market="BTC-USDT", interval=interval)] == expected


def test_a_derived_candle_is_never_cut_short_by_the_limit(btc_usdt):
    """The source candles are read up to ``limit`` buckets' worth: the bucket beyond them, partly read, is left out."""
    for minute in ("00", "02", "03", "05"):  # two 3m buckets (12:00, 12:03) of two 1m candles each
        candles_record(market_id=btc_usdt.id, time=at(f"2026-12-01T12:{minute}"), fills=[fill("100", "1")])
    whole = {c.open_time: all_figures(c) for c in candles(market="BTC-USDT", interval="3m")}
    assert [figures[7] for figures in whole.values()] == [2, 2]

    latest = candles(market="BTC-USDT", interval="3m", limit=1)  # reads 12:05, 12:03 and 12:02
    first = candles(market="BTC-USDT", interval="3m", start=at("2026-12-01T11:58"), limit=1)  # 12:00, 12:02, 12:03
    before = candles(market="BTC-USDT", interval="3m", end=at("2026-12-01T12:03"), limit=1)

    assert [all_figures(c) for c in latest] == [whole[at("2026-12-01T12:03")]]
    assert [all_figures(c) for c in first] == [whole[at("2026-12-01T12:00")]]
    assert [all_figures(c) for c in before] == [whole[at("2026-12-01T12:00")]]
    later = candles(market="BTC-USDT", interval="3m", start=at("2026-12-01T12:01"), end=at("2026-12-01T12:04"))
    assert [c.open_time for c in later] == [at("2026-12-01T12:03")]  # opens in [start, end)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"interval": "2m"}, "interval"),
        ({"interval": "1s"}, "interval"),
        ({"interval": "1m", "limit": 0}, "limit"),
        ({"interval": "1m", "limit": 1001}, "limit"),
        ({"interval": "1m", "start": at("2026-12-01T12:00"), "end": at("2026-12-01T12:00")}, "end"),
    ],
)
def test_bad_arguments_name_the_field(btc_usdt, kwargs, field):
    with pytest.raises(DomainError) as error:
        candles(market="BTC-USDT", **kwargs)
    assert list(error.value.fields) == [field]


def test_unknown_market(db):
    with pytest.raises(NotFound):
        candles(market="NOPE-USDT", interval="1m")


def test_placements_record_their_fills_at_the_makers_prices(btc_usdt, btc, usdt):
    """Price improvement: a bid at 60,000 fills at the makers' 59,900 and 59,950; the candles say so."""
    maker, taker, seller = UserFactory(), UserFactory(), UserFactory()
    fund(maker, btc, "1")
    fund(taker, usdt, "100000")
    fund(seller, btc, "1")
    place(maker, side="sell", price="59900", qty="0.1")
    place(maker, side="sell", price="59950", qty="0.2")
    place(taker, side="buy", price="60000", qty="0.3")  # two fills, one placement
    place(taker, side="buy", price="59800", qty="0.05")  # rests
    place(seller, side="sell", price="59700", qty="0.05")  # fills at the bid's 59,800

    assert Trade.objects.count() == 3
    for interval in Interval.values:
        rows = candles(market="BTC-USDT", interval=interval)
        # However the three trades fall across buckets, the candles hold exactly what traded.
        assert rows[0].open == D("59900") and rows[-1].close == D("59800"), interval
        assert max(c.high for c in rows) == D("59950") and min(c.low for c in rows) == D("59800")
        assert sum(c.volume for c in rows) == D("0.35")
        assert sum(c.quote_volume for c in rows) == D("20970")  # 5,990 + 11,990 + 2,990
        assert sum(c.trades for c in rows) == 3


def test_a_placement_without_fills_records_nothing(btc_usdt, btc):
    maker = UserFactory()
    fund(maker, btc, "1")
    place(maker, side="sell", price="59900", qty="0.1")

    assert not Candle.objects.exists()


def test_candles_roll_back_with_the_placement(btc_usdt, btc, usdt):
    """Written in the placement's transaction: when it rolls back, its candles go with its trades."""
    maker, taker = UserFactory(), UserFactory()
    fund(maker, btc, "1")
    fund(taker, usdt, "100000")
    place(maker, side="sell", price="59900", qty="0.1")
    with pytest.raises(RuntimeError), transaction.atomic():
        place(taker, side="buy", price="60000", qty="0.1")
        assert Candle.objects.count() == len(Interval.values)
        raise RuntimeError("roll back")

    assert not Trade.objects.exists()
    assert not Candle.objects.exists()


def test_the_migration_fills_from_trades_what_placements_record(btc_usdt, btc, usdt):
    """The candles kept placement by placement equal the set-based aggregation of the trades that the
    migration ran for the trades made before the table existed."""
    fill_from_trades = importlib.import_module("apps.marketdata.migrations.0001_candles").FILL_FROM_TRADES
    fill_taker_buys = importlib.import_module(
        "apps.marketdata.migrations.0002_candle_taker_buy_volumes"
    ).FILL_TAKER_BUYS
    maker, taker = UserFactory(), UserFactory()
    fund(maker, btc, "1")
    fund(taker, usdt, "100000")
    for price in ("59900", "59950", "60000"):
        place(maker, side="sell", price=price, qty="0.0100")
    place(taker, side="buy", price="60000", qty="0.0200")  # two fills
    place(taker, side="buy", price="60000", qty="0.0100")
    fund(taker, btc, "1")
    place(maker, side="buy", price="59000", qty="0.0100")
    place(taker, side="sell", price="59000", qty="0.0100")  # a taker sell: not a taker buy
    live = sorted((c.interval, *all_figures(c)) for c in Candle.objects.all())

    Candle.objects.all().delete()
    with connection.cursor() as cursor:
        cursor.execute(fill_from_trades)
        cursor.execute(fill_taker_buys)

    assert sorted((c.interval, *all_figures(c)) for c in Candle.objects.all()) == live
    assert any(c.taker_buy_volume for c in Candle.objects.all())
    assert len(live) >= len(Interval.values)


def test_taker_buy_volumes_count_the_fills_whose_taker_bought(btc_usdt, btc, usdt):
    """Binance's kline ``V``/``Q``: a buy taking two asks counts, a sell taking a bid does not."""
    maker, taker = UserFactory(), UserFactory()
    fund(maker, btc, "1")
    fund(maker, usdt, "100000")
    fund(taker, usdt, "100000")
    fund(taker, btc, "1")
    place(maker, side="sell", price="59900", qty="0.1")
    place(maker, side="sell", price="59950", qty="0.2")
    place(taker, side="buy", price="60000", qty="0.3")  # taker buys 0.3 for 17,980
    place(maker, side="buy", price="59000", qty="0.05")
    place(taker, side="sell", price="59000", qty="0.05")  # taker sells 0.05 for 2,950

    for interval in Interval.values:
        rows = candles(market="BTC-USDT", interval=interval)
        assert sum(c.volume for c in rows) == D("0.35"), interval
        assert sum(c.taker_buy_volume for c in rows) == D("0.3")
        assert sum(c.taker_buy_quote_volume for c in rows) == D("17980")


def test_candles_latest_name_their_first_and_last_trade(btc_usdt, btc, usdt):
    """Binance's kline ``f``/``L``: the integer ids of the newest candle's first and last trade, per interval."""
    maker, taker = UserFactory(), UserFactory()
    fund(maker, btc, "1")
    fund(taker, usdt, "100000")
    place(maker, side="sell", price="59900", qty="0.1")
    place(maker, side="sell", price="59950", qty="0.2")
    place(taker, side="buy", price="60000", qty="0.2")  # two fills
    place(taker, side="buy", price="60000", qty="0.1")  # one more
    numbers = [trade.number for trade in Trade.objects.order_by("created_at", "taker_order_id", "seq")]
    assert numbers[1] == numbers[0] + 1  # <taker order> * 10**6 + 1, then + 2

    latest = candles_latest(market_id=btc_usdt.id)

    assert [c.interval for c in latest] == list(KLINE_INTERVALS)  # stored and derived, in Binance's order
    day = latest[list(KLINE_INTERVALS).index("1d")]  # the three trades are in one day's candle, whatever the minute
    assert (day.first_trade, day.last_trade, day.trades) == (numbers[0], numbers[-1], 3)
    for candle in latest:
        assert candle.last_trade == numbers[-1], candle.interval
        (read,) = candles(market="BTC-USDT", interval=candle.interval, limit=1)
        assert all_figures(candle) == all_figures(read)


def test_a_live_stream_pushes_the_current_bucket_and_once_the_bucket_it_left_closed():
    traded = Kline("1m", at("2026-12-01T12:00"), D("100"), D("102"), D("99"), D("101"), D("0.7"), D("70.4"), 2)
    flat = (D("101"),) * 4 + (D(0), D(0), 0)  # open, high, low and close at the last close; no volume, no trade

    assert candles_live(traded, None, at("2026-12-01T12:00:40")) == [traded]  # its own bucket, as stored
    assert candles_live(traded, at("2026-12-01T12:00"), at("2026-12-01T12:00:42")) == [traded]  # still open
    left = candles_live(traded, at("2026-12-01T12:00"), at("2026-12-01T12:01:01"))
    assert left[0] == traded  # the bucket left, in its final state (the stream marks it closed)
    assert (left[1].open_time, *figures(left[1])[1:]) == (at("2026-12-01T12:01"), *flat)
    quiet = candles_live(traded, at("2026-12-01T12:01"), at("2026-12-01T12:03:30"))  # a bucket with no trade left
    assert [(k.open_time, *figures(k)[1:]) for k in quiet] == [
        (at("2026-12-01T12:01"), *flat),
        (at("2026-12-01T12:03"), *flat),
    ]
    assert candles_live(traded, at("2026-12-01T11:58"), at("2026-12-01T12:00:02")) == [traded]  # superseded: not sent
    assert candles_live(traded, None, at("2026-12-01T11:59:59")) == []  # a clock behind the trade's: nothing
    hourly = traded._replace(interval="1h")
    assert candles_live(hourly, at("2026-12-01T12:00"), at("2026-12-01T12:59:59")) == [hourly]


def test_a_live_month_closes_on_its_last_day_and_the_next_opens_on_the_first():
    """1M's buckets are calendar months: February 2026 closes after 28 days, March opens on the 1st."""
    february = Kline("1M", at("2026-02-01"), D("100"), D("102"), D("99"), D("101"), D("0.7"), D("70.4"), 2)

    assert candles_live(february, None, at("2026-02-28T23:59:59")) == [february]
    left = candles_live(february, at("2026-02-01"), at("2026-03-01T00:00:01"))
    assert [(k.open_time, k.close_time, k.close, k.trades) for k in left] == [
        (at("2026-02-01"), at("2026-02-28T23:59:59.999999"), D("101"), 2),
        (at("2026-03-01"), at("2026-03-31T23:59:59.999999"), D("101"), 0),
    ]
    weekly = february._replace(interval="1w", open_time=at("2026-02-02"))
    assert [k.open_time for k in candles_live(weekly, at("2026-02-02"), at("2026-02-09T00:00"))] == [
        at("2026-02-02"),
        at("2026-02-09"),  # a Monday
    ]
