"""Candles: exact figures from known trades, interval boundaries, empty intervals absent, the selector's window."""

import importlib
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.utils import timezone

from apps.core.errors import DomainError, NotFound
from apps.ledger.tests.factories import UserFactory, fund
from apps.marketdata.models import Candle, Interval
from apps.marketdata.selectors import Kline, candles, candles_continuous, candles_latest, candles_live
from apps.marketdata.services import candles_record
from apps.marketdata.tests.helpers import at, fill
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


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"interval": "2m"}, "interval"),
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

    assert [c.interval for c in latest] == Interval.values
    day = latest[-1]  # the three trades are in one day's candle, whatever the minute
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
