"""The market pages: markets list, book, trades, the order form, open orders with cancel, history and fills."""

from decimal import Decimal

import pytest
from django.utils.html import escape

from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.models import Order, OrderStatus
from apps.orders.tests.helpers import balance, place
from exchange.tests.html import amt

MARKET = "/markets/BTC-USDT/"
D = Decimal


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
    assert '<td class="num">60,000.00</td>' in page  # last price, at the tick
    assert 'class="num sell">60,000.00</td>' in page
    assert 'class="num buy">59,000.00</td>' in page


def test_market_page_is_public_with_book_and_trades_but_no_order_form(book, client):
    page = client.get(MARKET).content.decode()

    # Prices at the tick (0.01), quantities at the display precision with the exact amount in the tooltip.
    assert '<td class="num sell">61,000.00</td><td class="num"><span class="amount" title="0.2">0.2</span></td>' in page
    assert '<td class="num sell">60,000.00</td><td class="num"><span class="amount" title="0.2">0.2</span></td>' in page
    assert '<td class="num buy">59,000.00</td><td class="num"><span class="amount" title="0.4">0.4</span></td>' in page
    assert page.index("61,000.00") < page.index("59,000.00")  # asks above bids
    assert 'id="trades"' in page and amt("0.1") in page
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


def test_the_page_shows_amounts_at_display_precision(book, trader, client):
    client.force_login(trader)
    place(trader, side="buy", price="50000", qty="0.1")

    page = client.get(MARKET).content.decode()

    assert 'data-field="held"><span class="amount" title="5000">5,000</span><' in page
    assert "50,000.00" in page


def test_placing_a_limit_order_from_the_form(trader, client, usdt):
    client.force_login(trader)

    response = client.post(f"{MARKET}orders/", order_form())

    assert response.status_code == 302 and response.url == MARKET
    order = Order.objects.get(user=trader)
    assert (order.side, order.price, order.qty, order.status) == ("buy", Decimal(50000), Decimal("0.1"), "open")
    assert balance(trader, usdt) == (Decimal("5000"), Decimal("5000"))
    page = client.get(MARKET).content.decode()
    assert f"Order #{order.id}: buy limit, nothing filled; 0.1 BTC rests in the book at 50,000.00 USDT." in page
    assert f'<tr data-order="{order.id}">' in page and "5,000</span> USDT" in page
    assert 'data-field="held"><span class="amount" title="5000">5,000</span><' in page


def test_a_market_buy_with_a_budget_fills_and_shows_in_history_and_fills(book, trader, client, btc):
    client.force_login(trader)

    client.post(f"{MARKET}orders/", order_form(type="market", price="", qty="", quote_qty="1200"))

    order = Order.objects.get(user=trader)
    assert (order.status, order.filled_qty, order.time_in_force) == ("filled", Decimal("0.02"), "IOC")
    page = client.get(MARKET).content.decode()
    assert f'<tr data-order="{order.id}">' in page.split('id="order-history"')[1]
    assert '<span class="amount" title="0.00002">0.00002</span> BTC' in page.split('id="fills"')[1]
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

    response = client.post(f"{MARKET}orders/", form, follow=True)

    assert response.redirect_chain == [(MARKET, 302)]  # post/redirect/get: a reload sends nothing
    assert field in response.context["form"].errors
    assert f'id="id_{field}_error"' in response.content.decode() or field == "side"
    assert not Order.objects.exists()
    assert balance(trader, usdt) == (Decimal("10000"), Decimal("0"))


def test_insufficient_funds_is_shown_on_the_form(trader, client):
    client.force_login(trader)
    response = client.post(f"{MARKET}orders/", order_form(qty="1"), follow=True)
    assert response.redirect_chain == [(MARKET, 302)]
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

    response = client.post(f"{MARKET}orders/", order_form(client_order_id="sent", price="49000"), follow=True)

    assert response.redirect_chain == [(MARKET, 302)]
    form = response.context["form"]
    assert "already placed from this form" in form.non_field_errors()[0]
    assert Order.objects.count() == 1
    fresh = form["client_order_id"].value()
    assert fresh != "sent" and f'value="{fresh}"' in response.content.decode()
    client.post(f"{MARKET}orders/", order_form(client_order_id=fresh, price="49000"))
    assert sorted(Order.objects.values_list("price", flat=True)) == [Decimal(49000), Decimal(50000)]


def test_a_market_sell_says_what_filled_at_what_average_and_what_was_not_filled(book, btc, client):
    """The only bid is 0.4 BTC at 59,000: selling 0.5 at market fills 0.4 and releases 0.1."""
    seller = UserFactory()
    fund(seller, btc, "1")
    client.force_login(seller)

    response = client.post(f"{MARKET}orders/", order_form(side="sell", type="market", price="", qty="0.5"), follow=True)

    order = Order.objects.get(user=seller)
    assert (order.filled_qty, order.status) == (Decimal("0.4"), OrderStatus.EXPIRED)
    expected = f"Order #{order.id}: sold 0.4 BTC at 59,000.00 USDT average; 0.1 BTC not filled: no more bids."
    assert expected in response.content.decode()
    history = response.content.decode().split('id="order-history"')[1]
    assert '<td class="num" data-field="average-price">59,000.00</td>' in history


def test_a_market_buy_across_two_levels_shows_the_average_price(book, usdt, client):
    trader = UserFactory()
    fund(trader, usdt, "20000")
    client.force_login(trader)

    response = client.post(f"{MARKET}orders/", order_form(type="market", price="", qty="0.3"), follow=True)

    order = Order.objects.get(user=trader)
    # 0.2 at 60,000 (what is left of the 0.3 ask) and 0.1 at 61,000: 18,100 / 0.3 = 60,333.33...
    assert (order.filled_qty, order.filled_quote_qty) == (Decimal("0.3"), Decimal("18100"))
    assert f"Order #{order.id}: bought 0.3 BTC at 60,333.33 USDT average." in response.content.decode()


def test_a_halted_market_shows_a_notice_instead_of_the_order_form(btc_usdt, trader, client):
    from apps.orders.services import market_halt

    market_halt(market_id=btc_usdt.id, operator_id=UserFactory().id, reason="maintenance")
    client.force_login(trader)

    page = client.get(MARKET).content.decode()

    assert 'id="market-halted"' in page and "Trading on BTC-USDT is halted" in page
    assert 'id="place-order"' not in page
    assert 'id="market-balances"' in page


def test_home_shows_the_markets_to_everyone(book, client, trader):
    for logged_in in (False, True):
        if logged_in:
            client.force_login(trader)
        response = client.get("/")
        assert response.status_code == 200
        assert 'href="/markets/BTC-USDT/"' in response.content.decode()


def test_an_unknown_market_is_the_sites_own_404_page_even_with_debug_on(btc_usdt, client, settings):
    for debug in (False, True):
        settings.DEBUG = debug
        response = client.get("/markets/DOGE-USDT/")
        page = response.content.decode()
        assert response.status_code == 404
        assert 'id="not-found"' in page and "/markets/DOGE-USDT/" in page
        assert "URLconf" not in page  # never Django's technical 404 page


def test_every_page_links_the_favicon(client, btc_usdt):
    from django.contrib.staticfiles import finders

    page = client.get("/markets/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page
    assert open(finders.find("favicon.svg")).read().startswith("<svg ")


def test_a_market_order_stopped_by_the_price_protection_says_so(book, btc_usdt, usdt, client):
    from apps.orders.services import market_filters_update

    market_filters_update(
        market_id=btc_usdt.id,
        min_qty=D("0.0001"),
        max_qty=D("1000"),
        min_notional=D("1"),
        market_order_price_band=D("1"),
    )
    trader = UserFactory()
    fund(trader, usdt, "100000")
    client.force_login(trader)

    response = client.post(f"{MARKET}orders/", order_form(type="market", price="", qty="0.3"), follow=True)

    order = Order.objects.get(user=trader)
    expected = (
        f"Order #{order.id}: bought 0.2 BTC at 60,000.00 USDT average; "
        "0.1 BTC not filled: beyond the market's price protection."
    )
    assert escape(expected) in response.content.decode()


def test_the_order_form_speaks_the_pages_words_not_the_apis_field_names(trader, client):
    client.force_login(trader)

    response = client.post(
        f"{MARKET}orders/", order_form(type="market", price="", qty="0.1", quote_qty="10"), follow=True
    )

    (error,) = response.context["form"].errors["qty"]
    assert error == 'A market buy takes either "Amount (BTC)" or "Spend (USDT, market buys instead of an amount)".'


def test_the_market_rules_are_shown_in_full_even_finer_than_the_display_places(btc_usdt, btc, usdt, client):
    btc.display_decimals = 2
    btc.save(update_fields=["display_decimals"])
    btc_usdt.min_notional = D("1234.5")
    btc_usdt.save(update_fields=["min_notional"])

    page = client.get(MARKET).content.decode()

    assert "tick 0.01 · step 0.0001 · minimum order 1,234.5 USDT" in page


def test_the_24_hour_strip_shows_prices_at_the_tick_and_the_volume_at_display_precision(book, btc, client):
    btc.display_decimals = 3
    btc.save(update_fields=["display_decimals"])

    strip = client.get(MARKET).content.decode().split('id="ticker-strip"')[1].split("</dl>")[0]

    assert '<dd data-field="last">60,000.00</dd>' in strip
    assert '<dd data-field="high">60,000.00</dd>' in strip and '<dd data-field="low">60,000.00</dd>' in strip
    assert f'<dd data-field="volume">{amt("0.1")}</dd>' in strip


@pytest.mark.parametrize("client_order_id", ["a\tb", "line\nbreak", "ok\u202etxt", "zero\u200bwidth"])
def test_an_unprintable_client_order_id_from_the_form_is_refused(trader, client, client_order_id):
    """The hidden field, tampered: the API refused such an id, the form placed the order, and then no query could
    name it (break-it review)."""
    client.force_login(trader)

    response = client.post(f"{MARKET}orders/", order_form(client_order_id=client_order_id), follow=True)

    assert response.context["form"].errors["client_order_id"] == [
        "Only printable characters (no controls, tabs or line breaks)."
    ]
    assert not Order.objects.exists()


@pytest.fixture
def engine_not_answering(settings):
    """Sequencer mode with no engine running: commands stay queued and every wait ends in status unknown."""
    from apps.orders.services import answers
    from apps.orders.services.commands import queue_connection_close

    settings.ORDERS_ENGINE, settings.ORDERS_ENGINE_WAIT_SECONDS = "sequencer", 0.2
    yield
    queue_connection_close()
    answers.listener_close()


@pytest.mark.django_db(transaction=True)
def test_an_order_the_engine_has_not_answered_says_it_may_still_be_placed(trader, client, engine_not_answering):
    """The page said only "Status unknown." (break-it review)."""
    from apps.web.markets import PLACEMENT_UNKNOWN

    client.force_login(trader)

    response = client.post(f"{MARKET}orders/", order_form(client_order_id="late-web"), follow=True)

    form = response.context["form"]
    assert form.non_field_errors() == [PLACEMENT_UNKNOWN]
    assert form["client_order_id"].value() == "late-web"  # the same key: sending it again places it once
    assert not Order.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_cancel_the_engine_has_not_answered_says_it_may_still_happen(trader, client, settings, engine_not_answering):
    settings.ORDERS_ENGINE = "inline"
    order = place(trader, side="buy", price="50000", qty="0.1")
    settings.ORDERS_ENGINE = "sequencer"
    client.force_login(trader)

    response = client.post(f"/orders/{order.id}/cancel/", follow=True)

    assert [str(m) for m in response.context["messages"]] == [
        f"The cancel of order #{order.id} was sent, but the matching engine has not answered yet: it may still be "
        "cancelled (or fill first). Check your open orders in a moment."
    ]
    assert Order.objects.get().status == OrderStatus.OPEN
