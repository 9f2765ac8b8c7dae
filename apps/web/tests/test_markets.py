"""The market pages: markets list, book, trades, the order form, open orders with cancel, history and fills."""

from decimal import Decimal

import pytest

from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.models import Order, OrderStatus
from apps.orders.tests.helpers import balance, place

MARKET = "/markets/BTC-USDT/"


@pytest.fixture
def trader(btc_usdt, usdt):
    trader = UserFactory()
    fund(trader, usdt, "10000")
    return trader


@pytest.fixture
def book(btc_usdt, btc, usdt):
    """Another trader's asks at 61,000 and 60,000 and a bid at 59,000, and one trade at 60,000."""
    other, buyer = UserFactory(), UserFactory()
    fund(other, btc, "1")
    fund(buyer, usdt, "100000")
    place(other, side="sell", price="61000", qty="0.2")
    place(other, side="sell", price="60000", qty="0.3")
    place(buyer, side="buy", price="60000", qty="0.1")
    place(buyer, side="buy", price="59000", qty="0.4")
    return other


def order_form(**overrides) -> dict:
    return {
        "side": "buy",
        "type": "limit",
        "price": "50000",
        "qty": "0.1",
        "quote_qty": "",
        "time_in_force": "",
        "client_order_id": "form-1",
        **overrides,
    }


def test_markets_list_shows_last_price_and_best_bid_and_ask(book, client):
    page = client.get("/markets/").content.decode()
    assert 'href="/markets/BTC-USDT/"' in page
    assert '<td class="num">60000.000000</td>' in page  # last price
    assert 'class="num sell">60000.000000</td>' in page
    assert 'class="num buy">59000.000000</td>' in page


def test_market_page_is_public_with_book_and_trades_but_no_order_form(book, client):
    page = client.get(MARKET).content.decode()

    assert '<td class="num sell">61000.000000</td><td class="num">0.20000000</td>' in page
    assert '<td class="num sell">60000.000000</td><td class="num">0.20000000</td>' in page
    assert '<td class="num buy">59000.000000</td><td class="num">0.40000000</td>' in page
    assert page.index("61000.000000") < page.index("59000.000000")  # asks above bids
    assert 'id="trades"' in page and "0.10000000" in page
    assert 'id="place-order"' not in page
    assert "to trade" in page


def test_an_unknown_market_is_404(btc_usdt, client):
    assert client.get("/markets/DOGE-USDT/").status_code == 404


def test_the_page_is_kept_live_by_the_streams_script_not_by_polling(book, trader, client, settings):
    settings.STREAMS_URL = "wss://streams.example"
    client.force_login(trader)

    page = client.get(MARKET).content.decode()

    assert "hx-trigger" not in page and "every 2s" not in page
    assert 'data-stream-symbol="btcusdt"' in page and 'data-streams-url="wss://streams.example"' in page
    assert 'data-authenticated="true"' in page
    assert "js/market.js" in page and "vendor/lightweight-charts-5.2.1.standalone.production.js" in page
    assert 'id="price-chart"' in page and 'id="depth-chart"' in page and 'id="ticker-strip"' in page
    for interval in ("1m", "5m", "15m", "1h", "4h", "1d"):
        assert f'data-interval="{interval}"' in page
    assert "<script>" not in page  # no inline script (Content-Security-Policy)


def test_placing_a_limit_order_from_the_form(trader, client, usdt):
    client.force_login(trader)

    response = client.post(f"{MARKET}orders/", order_form())

    assert response.status_code == 302 and response.url == MARKET
    order = Order.objects.get(user=trader)
    assert (order.side, order.price, order.qty, order.status) == ("buy", Decimal(50000), Decimal("0.1"), "open")
    assert balance(trader, usdt) == (Decimal("5000"), Decimal("5000"))
    page = client.get(MARKET).content.decode()
    assert f"Order #{order.id} buy limit: open." in page
    assert f'<tr data-order="{order.id}">' in page and "5000.000000 USDT" in page
    assert 'data-field="held">5000.000000<' in page


def test_a_market_buy_with_a_budget_fills_and_shows_in_history_and_fills(book, trader, client, btc):
    client.force_login(trader)

    client.post(f"{MARKET}orders/", order_form(type="market", price="", qty="", quote_qty="1200"))

    order = Order.objects.get(user=trader)
    assert (order.status, order.filled_qty, order.time_in_force) == ("filled", Decimal("0.02"), "IOC")
    page = client.get(MARKET).content.decode()
    assert f'<tr data-order="{order.id}">' in page.split('id="order-history"')[1]
    assert "0.00002000 BTC" in page.split('id="fills"')[1]
    assert balance(trader, btc) == (Decimal("0.01998"), Decimal("0"))


@pytest.mark.parametrize(
    ("form", "field"),
    [
        (order_form(price="abc"), "price"),
        (order_form(price="50000.001"), "price"),
        (order_form(price="-1"), "price"),
        (order_form(price=""), "price"),
        (order_form(qty="NaN"), "qty"),
        (order_form(qty="0.00001"), "qty"),
        (order_form(qty="1E+2"), "qty"),
        (order_form(side="hold"), "side"),
        (order_form(type="market", price="", qty="", time_in_force="GTC", quote_qty="10"), "time_in_force"),
    ],
)
def test_form_errors_are_shown_next_to_the_field_and_nothing_is_placed(trader, client, usdt, form, field):
    client.force_login(trader)

    response = client.post(f"{MARKET}orders/", form)

    assert response.status_code == 400
    assert field in response.context["form"].errors
    assert f'id="id_{field}_error"' in response.content.decode() or field == "side"
    assert not Order.objects.exists()
    assert balance(trader, usdt) == (Decimal("10000"), Decimal("0"))


def test_insufficient_funds_is_shown_on_the_form(trader, client):
    client.force_login(trader)
    response = client.post(f"{MARKET}orders/", order_form(qty="1"))
    assert response.status_code == 400
    errors = response.context["form"].non_field_errors()
    assert len(errors) == 1 and "insufficient" in errors[0].lower()
    assert not Order.objects.exists()


def test_a_double_submit_of_the_form_places_one_order(trader, client, usdt):
    client.force_login(trader)
    client.post(f"{MARKET}orders/", order_form(client_order_id="twice"))
    client.post(f"{MARKET}orders/", order_form(client_order_id="twice"))
    assert Order.objects.count() == 1
    assert balance(trader, usdt) == (Decimal("5000"), Decimal("5000"))


def test_cancelling_an_open_order_releases_its_funds(trader, client, usdt):
    order = place(trader, side="buy", price="50000", qty="0.1")
    client.force_login(trader)

    response = client.post(f"/orders/{order.id}/cancel/", {"next": MARKET})

    assert response.status_code == 302 and response.url == MARKET
    assert Order.objects.get(id=order.id).status == OrderStatus.CANCELLED
    assert balance(trader, usdt) == (Decimal("10000"), Decimal("0"))
    page = client.get(MARKET).content.decode()
    assert f"Order #{order.id} cancelled." in page
    assert "No open orders." in page


def test_a_trader_cannot_cancel_someone_elses_order(trader, client):
    order = place(trader, side="buy", price="50000", qty="0.1")
    client.force_login(UserFactory())

    response = client.post(f"/orders/{order.id}/cancel/", {"next": "https://evil.example/"}, follow=True)

    assert response.redirect_chain[0][0] == "/markets/"
    assert f"No order {order.id}." in response.content.decode()
    assert Order.objects.get(id=order.id).status == OrderStatus.OPEN


def test_trading_needs_a_log_in(trader, client):
    order = place(trader, side="buy", price="50000", qty="0.1")
    for url in (f"{MARKET}orders/", f"/orders/{order.id}/cancel/"):
        response = client.post(url, order_form())
        assert response.status_code == 302 and response.url.startswith("/accounts/login/")
    assert Order.objects.count() == 1


def test_a_changed_resubmit_of_a_sent_form_places_nothing_and_gets_a_fresh_key(trader, client):
    client.force_login(trader)
    client.post(f"{MARKET}orders/", order_form(client_order_id="sent"))

    response = client.post(f"{MARKET}orders/", order_form(client_order_id="sent", price="49000"))

    assert response.status_code == 400
    form = response.context["form"]
    assert "already placed from this form" in form.non_field_errors()[0]
    assert Order.objects.count() == 1
    fresh = form["client_order_id"].value()
    assert fresh != "sent" and f'value="{fresh}"' in response.content.decode()
    client.post(f"{MARKET}orders/", order_form(client_order_id=fresh, price="49000"))
    assert sorted(Order.objects.values_list("price", flat=True)) == [Decimal(49000), Decimal(50000)]
