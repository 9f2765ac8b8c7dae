"""The 24-hour ticker: its window's edges to the microsecond, the figures inside, best bid and ask."""

from datetime import timedelta
from decimal import Decimal

import pytest

from apps.core.errors import NotFound
from apps.ledger.tests.factories import UserFactory, fund
from apps.marketdata.selectors import ticker_24h, tickers_24h
from apps.orders.models import Trade
from apps.orders.services import market_create
from apps.orders.tests.helpers import place

D = Decimal
DAY = timedelta(hours=24)
US = timedelta(microseconds=1)


@pytest.fixture
def traded(btc_usdt, btc, usdt):
    """Two placements: A buys 0.1 at 59,900 (improved from 60,000), then B sells 0.2 to a bid at 59,000.

    Left resting: bids 0.1 + 0.3 at 58,000 (two users), an ask 0.5 at 61,000.
    """
    maker, taker, other = UserFactory(), UserFactory(), UserFactory()
    fund(maker, btc, "2")
    fund(maker, usdt, "100000")
    fund(taker, usdt, "100000")
    fund(taker, btc, "1")
    fund(other, usdt, "100000")
    place(maker, side="sell", price="59900", qty="0.1")
    place(taker, side="buy", price="60000", qty="0.1")
    place(maker, side="buy", price="59000", qty="0.2")
    place(taker, side="sell", price="58500", qty="0.2")
    place(maker, side="buy", price="58000", qty="0.1")
    place(other, side="buy", price="58000", qty="0.3")
    place(maker, side="sell", price="61000", qty="0.5")
    first, second = Trade.objects.order_by("created_at")
    return first.created_at, second.created_at


def figures(ticker) -> tuple:
    return (
        ticker.last,
        ticker.open,
        ticker.high,
        ticker.low,
        ticker.change,
        ticker.change_percent,
        ticker.volume,
        ticker.quote_volume,
        ticker.trades,
    )


BOTH = (D("59000"), D("59900"), D("59900"), D("59000"), D("-900"), D("-1.50"), D("0.3"), D("17790"), 2)


def test_inside_the_window_from_whole_minutes(traded):
    first, _ = traded
    ticker = ticker_24h(market="BTC-USDT", now=first + timedelta(hours=1))

    assert figures(ticker) == BOTH  # 900 / 59,900 = 1.5025 %
    assert (ticker.bid, ticker.bid_qty, ticker.ask, ticker.ask_qty) == (D("58000"), D("0.4"), D("61000"), D("0.5"))
    assert (ticker.open_time, ticker.close_time) == (first + timedelta(hours=1) - DAY, first + timedelta(hours=1))


def test_the_window_starts_exactly_24_hours_back(traded):
    first, second = traded

    assert figures(ticker_24h(market="BTC-USDT", now=first + DAY)) == BOTH  # the first trade is on the edge: in
    after = ticker_24h(market="BTC-USDT", now=first + DAY + US)  # a microsecond later it is out
    assert figures(after) == (
        D("59000"),
        D("59000"),
        D("59000"),
        D("59000"),
        D("0"),
        D("0.00"),
        D("0.2"),
        D("11800"),
        1,
    )
    gone = ticker_24h(market="BTC-USDT", now=second + DAY + US)
    assert figures(gone) == (D("59000"), None, None, None, None, None, D("0"), D("0"), 0)  # last price stays


def test_whole_minutes_before_the_first_whole_hour_and_after_the_last(traded):
    """The window's 1m candles beside its 1h candles: the trades' minute at the start, then at the end."""
    first, second = traded
    first_minute = first.replace(second=0, microsecond=0)
    after_second = second.replace(second=0, microsecond=0) + timedelta(minutes=2)

    assert figures(ticker_24h(market="BTC-USDT", now=first_minute + DAY)) == BOTH
    assert figures(ticker_24h(market="BTC-USDT", now=after_second)) == BOTH
    assert figures(ticker_24h(market="BTC-USDT", now=first + timedelta(hours=12))) == BOTH  # 1h candles


def test_the_window_ends_at_now(traded):
    first, _ = traded

    at_first = ticker_24h(market="BTC-USDT", now=first)
    assert figures(at_first) == (
        D("59900"),
        D("59900"),
        D("59900"),
        D("59900"),
        D("0"),
        D("0.00"),
        D("0.1"),
        D("5990"),
        1,
    )
    before = ticker_24h(market="BTC-USDT", now=first - US)
    assert figures(before) == (None, None, None, None, None, None, D("0"), D("0"), 0)


def test_every_market_at_once(traded, btc, usdt):
    eth = btc.__class__.objects.create(code="ETH", name="Ether", decimals=18)
    market_create(
        base=eth, quote=usdt, tick_size=D("0.01"), step_size=D("0.0001"), min_qty=D("0.0001"), max_qty=D("1000")
    )
    first, _ = traded

    tickers = tickers_24h(now=first + timedelta(hours=1))

    assert [t.symbol for t in tickers] == ["BTC-USDT", "ETH-USDT"]
    assert figures(tickers[0]) == BOTH
    assert figures(tickers[1]) == (None, None, None, None, None, None, D("0"), D("0"), 0)
    assert (tickers[1].bid, tickers[1].ask) == (None, None)


def test_unknown_market(db):
    with pytest.raises(NotFound):
        ticker_24h(market="NOPE-USDT")


def trade_ids(ticker) -> tuple:
    return ticker.prev_close, ticker.last_qty, ticker.first_trade, ticker.last_trade


def test_previous_close_last_quantity_and_the_windows_trade_ids(traded):
    """Binance's ``x`` (the last price before the window), ``Q`` (the last trade's quantity), ``F``/``L``."""
    first, second = traded
    a, b = (trade.number for trade in Trade.objects.order_by("created_at"))

    assert trade_ids(ticker_24h(market="BTC-USDT", now=first + timedelta(hours=1))) == (None, D("0.2"), a, b)
    # A microsecond past the first trade's 24 hours: it is the previous close, the second the only trade.
    assert trade_ids(ticker_24h(market="BTC-USDT", now=first + DAY + US)) == (D("59900"), D("0.2"), b, b)
    gone = ticker_24h(market="BTC-USDT", now=second + DAY + US)
    assert trade_ids(gone) == (D("59000"), D("0.2"), None, None)
    at_first = ticker_24h(market="BTC-USDT", now=first)
    assert trade_ids(at_first) == (None, D("0.1"), a, a)
    assert trade_ids(ticker_24h(market="BTC-USDT", now=first - US)) == (None, None, None, None)
