"""The markets list: 24-hour change and volume, and the price line of the last 24 hourly candles."""

from datetime import timedelta
from decimal import Decimal

from apps.ledger.tests.factories import UserFactory, fund
from apps.marketdata.selectors import Kline
from apps.marketdata.tests.helpers import at
from apps.orders.tests.helpers import place
from apps.web.sparkline import sparkline


def hour(start, n: int, close: str) -> Kline:
    """The 1h candle ``n`` hours after ``start`` of one trade at ``close``."""
    price = Decimal(close)
    return Kline("1h", start + timedelta(hours=n), price, price, price, price, Decimal(1), price, 1)


def test_the_line_places_each_traded_hour_on_the_time_axis():
    start = at("2026-12-01T00:00")
    hourly = [hour(start, 0, "100"), hour(start, 12, "110"), hour(start, 23, "105")]  # hours 1-11: no trade

    line = sparkline(hourly, start=start)

    assert line.points == "2.0,30.0 62.5,2.0 118.0,16.0"
    assert sparkline([], start=start) is None


def test_a_flat_line_sits_in_the_middle():
    start = at("2026-12-01T00:00")
    line = sparkline([hour(start, 23, "7")], start=start)

    assert line.points == "114.0,16.0 118.0,16.0"


def test_markets_list_shows_24h_change_volume_and_a_price_line(btc_usdt, btc, usdt, client):
    seller, buyer = UserFactory(), UserFactory()
    fund(seller, btc, "1")
    fund(buyer, usdt, "100000")
    place(seller, side="sell", price="60000", qty="0.3")
    place(buyer, side="buy", price="60000", qty="0.1")
    place(seller, side="sell", price="59000", qty="0.1")
    place(buyer, side="buy", price="61000", qty="0.1")  # at the ask of 59,000: -1.67 %

    page = client.get("/markets/").content.decode()

    assert '<td class="num sell" data-field="change_percent">-1.67 %</td>' in page
    assert '<td class="num" data-field="volume">0.20000000 <span class="muted">BTC</span></td>' in page
    assert '<svg class="sparkline sell"' in page  # coloured by the 24-hour change
    assert '<polyline points="' in page


def test_a_market_without_trades_shows_dashes(btc_usdt, client):
    page = client.get("/markets/").content.decode()

    assert '<td class="num " data-field="change_percent">–</td>' in page
    assert "<svg" not in page
