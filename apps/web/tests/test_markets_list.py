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
    assert (
        '<td class="num" data-field="volume"><span class="amount" title="0.2">0.2</span> <span class="muted">BTC</span>'
    ) in page
    assert '<svg class="sparkline sell"' in page  # coloured by the 24-hour change
    assert '<polyline points="' in page


def test_a_market_without_trades_shows_dashes(btc_usdt, client):
    page = client.get("/markets/").content.decode()

    assert '<td class="num " data-field="change_percent">–</td>' in page
    assert "<svg" not in page


def test_markets_list_shows_prices_at_the_tick_and_amounts_at_display_precision(btc_usdt, btc, funded_user, client):
    btc.display_decimals = 3
    btc.save(update_fields=["display_decimals"])
    seller, buyer = funded_user(btc="2"), funded_user(usdt="1000000")
    place(seller, side="sell", price="61234.5", qty="1.2345")
    place(buyer, side="buy", price="61234.5", qty="1.2345")
    place(buyer, side="buy", price="60000", qty="0.1")
    place(seller, side="sell", price="62000.1", qty="0.1")

    row = client.get("/markets/").content.decode().split('<tr data-market="BTC-USDT">')[1].split("</tr>")[0]

    cells = [cell.split(">", 1)[1].strip() for cell in row.split("<td")[1:]]
    assert cells[1] == "61,234.50</td>"  # last price, at the tick's two places
    assert cells[4] == '<span class="amount" title="1.2345">1.234</span> <span class="muted">BTC</span></td>'
    assert cells[5:9] == [
        "60,000.00</td>",
        "62,000.10</td>",
        "0.01</td>",
        "0.0001</td>",  # the step in full, finer than BTC's three display places
    ]
