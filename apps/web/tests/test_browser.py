"""The traders' UI in a real browser: Playwright driving Debian's Chromium against the live server.

Sign up, show the deposit address, receive a deposit through the simulated custody, place a
limit order on the market page, see it under open orders and its funds under "On hold",
see the book update from the streams, cancel the order and see the funds available again. On a
market with trades: the candlestick chart draws the candles, another trader's order fills the
user's resting order and the fill arrives on the page without a reload (a toast, the balances,
the open orders), the book updates and marks the user's own order. A screenshot of the market
page is saved to ``artifacts/market-page.png``. Turn the second factor on from the security
page's QR code and secret (screenshot ``artifacts/security-page.png``), then add a withdrawal
address with a code.

Chromium comes from Debian (``/usr/bin/chromium``; ``.ci/run`` installs it with apt), never
from Playwright's own download.
"""

import re
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from apps.ledger.tests.factories import UserFactory, fund
from apps.marketdata.selectors import candles
from apps.orders.models import Order, OrderStatus
from apps.orders.services import order_place
from apps.wallets.tests.factories import deposit_through_custody
from devtools.chromium import CHROMIUM, CHROMIUM_ARGS

SCREENSHOT = Path(settings.BASE_DIR) / "artifacts" / "market-page.png"
PASSWORD = "a long and unusual passphrase 42"
# The wallet's live parts poll every 2 or 3 s, the market page follows the streams; allow a busy machine time.
LIVE_TIMEOUT_MS = 20_000

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


@pytest.fixture
def browser_page(transactional_db, live_server, monkeypatch):
    """A Chromium page; Django may be called from this test's thread while Playwright's event loop runs in it.

    (``transactional_db`` first: the test database is then set up before the live server and dropped after
    it has stopped, with no connection of its threads left open.)"""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900}, base_url=live_server.url)
            page.set_default_timeout(LIVE_TIMEOUT_MS)
            yield page
        finally:
            browser.close()
            connections.close_all()  # those this thread opened while Playwright's loop ran


@pytest.fixture
def busy_market(btc_usdt, usdt, btc):
    """BTC-USDT with resting orders on both sides and one trade, from two other traders."""
    seller, buyer = UserFactory(), UserFactory()
    fund(seller, btc, "2")
    fund(buyer, usdt, "100000")
    order_place(user_id=seller.id, market="BTC-USDT", side="sell", price="61000", qty="0.25")
    order_place(user_id=seller.id, market="BTC-USDT", side="sell", price="60500", qty="0.1")
    order_place(user_id=seller.id, market="BTC-USDT", side="sell", price="60000", qty="0.05")
    order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="60000", qty="0.02")  # a trade
    order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="59500", qty="0.3")
    return seller


def balance_cell(page, container: str, asset: str, field: str):
    return page.locator(f"{container} tr[data-asset='{asset}'] td[data-field='{field}']")


def test_sign_up_deposit_place_and_cancel_a_limit_order(browser_page, busy_market, usdt, live_streams):
    page = browser_page

    # Sign up.
    page.goto("/signup/")
    page.fill("#id_username", "browser-trader")
    page.fill("#id_password1", PASSWORD)
    page.fill("#id_password2", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{page.url.split('/wallet/')[0]}/wallet/")
    expect(page.locator(".messages")).to_contain_text("Welcome")

    # The deposit address (htmx), then coins arrive through the simulated custody's signed callbacks.
    page.click("#deposit-addresses tr[data-asset='USDT'] button")
    address = page.locator("#deposit-addresses code.address[data-asset='USDT']")
    expect(address).to_have_text(re.compile(r"^sim1[0-9a-f]{40}$"))
    trader = get_user_model().objects.get(username="browser-trader")
    deposit = deposit_through_custody(trader, usdt, "1000")
    assert deposit.address.address == address.inner_text()
    expect(balance_cell(page, "#balances", "USDT", "available")).to_have_text("1,000", timeout=LIVE_TIMEOUT_MS)

    # Place a limit buy on the market page.
    page.click("header nav >> text=Markets")
    page.click("a:has-text('BTC-USDT')")
    expect(page.locator("h1")).to_have_text("BTC-USDT")
    page.fill("#id_price", "58000")
    page.fill("#id_qty", "0.01")
    page.click("#place-order")

    order = Order.objects.get(user=trader)
    expect(page.locator(".messages")).to_contain_text(
        f"Order #{order.id}: buy limit, nothing filled; 0.01 BTC rests in the book at 58,000.00 USDT."
    )
    row = page.locator(f"#open-orders tr[data-order='{order.id}']")
    expect(row).to_contain_text("58,000.00")
    expect(row).to_contain_text("580 USDT")
    expect(balance_cell(page, "#market-balances", "USDT", "held")).to_have_text("580")
    expect(balance_cell(page, "#market-balances", "USDT", "available")).to_have_text("420")
    expect(page.locator("#book tr.bid").first).to_contain_text("59,500.00")

    # The book refreshes by itself: another trader's new ask appears without a reload.
    order_place(user_id=busy_market.id, market="BTC-USDT", side="sell", price="60200", qty="0.07")
    expect(page.locator("#book")).to_contain_text("60,200.00", timeout=LIVE_TIMEOUT_MS)

    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)

    # Cancel: the order leaves the open orders and its funds are available again.
    row.locator("button", has_text="Cancel").click()
    expect(page.locator(".messages")).to_contain_text(f"Order #{order.id} cancelled")
    expect(page.locator("#open-orders")).to_contain_text("No open orders.")
    expect(page.locator(f"#order-history tr[data-order='{order.id}']")).to_contain_text("Cancelled")
    expect(balance_cell(page, "#market-balances", "USDT", "available")).to_have_text("1,000")
    expect(balance_cell(page, "#market-balances", "USDT", "held")).to_have_text("0")
    order.refresh_from_db()
    assert (order.status, order.held_remaining) == (OrderStatus.CANCELLED, Decimal(0))
    assert SCREENSHOT.stat().st_size > 0


def test_turn_on_the_second_factor_from_the_qr_page_and_add_a_withdrawal_address(browser_page, usdt):
    import base64

    from django_otp.plugins.otp_totp.models import TOTPDevice

    from apps.accounts.tests.otp import totp_code, user_code
    from apps.wallets.custody.simnet import new_address
    from apps.wallets.models import WithdrawalAddress

    page = browser_page
    trader = UserFactory(password=PASSWORD)
    page.goto("/accounts/login/")
    page.fill("#id_username", trader.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.click("header nav >> text=Security")
    page.fill("#start-form-password", PASSWORD)  # a session alone cannot set one up: the password is asked again
    page.click("#second-factor button[type=submit]")

    expect(page.locator("#otp-qr svg path")).to_have_count(1)
    secret = page.locator("#otp-secret").inner_text()
    device = TOTPDevice.objects.get(user=trader, confirmed=False)
    assert base64.b32decode(secret) == device.bin_key  # the page shows the key the device checks codes with
    page.fill("#id_otp", totp_code(device))
    page.click("text=Turn on")

    expect(page.locator("#recovery-codes li")).to_have_count(10)
    expect(page.locator("#second-factor")).to_contain_text("On: withdrawals")
    page.screenshot(path=str(SCREENSHOT.with_name("security-page.png")), full_page=True)

    page.click("header nav >> text=Wallet")
    address = new_address()
    page.select_option("#id_book-asset", "USDT")
    page.fill("#id_book-address", address)
    page.fill("#id_book-label", "hardware wallet")
    # The code used above is refused again; the next one in the device's window (after any drift it learnt) is accepted.
    page.fill("#id_book-otp", user_code(trader))
    page.click("#address-form button[type=submit]")

    expect(page.locator(".messages")).to_contain_text("confirm it with the link we e-mailed you")
    expect(page.locator("#withdrawal-addresses")).to_contain_text("Waiting for e-mail confirmation")
    assert WithdrawalAddress.objects.get(user=trader).label == "hardware wallet"


def test_the_market_page_draws_candles_and_shows_a_fill_and_book_changes_live(
    browser_page, busy_market, btc, usdt, live_streams
):
    page = browser_page
    trader = UserFactory(username="chart-trader")
    trader.set_password(PASSWORD)
    trader.save()
    fund(trader, usdt, "10000")
    resting = order_place(user_id=trader.id, market="BTC-USDT", side="buy", price="59800", qty="0.05")
    page.goto(reverse("login"))
    page.fill("#id_username", "chart-trader")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.goto("/markets/BTC-USDT/")
    live = page.locator("#market-live")
    expect(live).to_have_attribute("data-stream", "open", timeout=LIVE_TIMEOUT_MS)

    # The chart: the busy market's trade is a candle (REST), drawn on the chart's canvas.
    expect(live).to_have_attribute("data-candles", "1", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#price-chart canvas").first).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#depth-chart canvas").first).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#ticker-strip [data-field='last']")).to_have_text("60,000.00", timeout=LIVE_TIMEOUT_MS)

    # The book updates from the depth stream (amounts shown as the server shows them) and marks the trader's own order.
    expect(page.locator("#book tr.bid.own")).to_contain_text("59,800.00", timeout=LIVE_TIMEOUT_MS)
    order_place(user_id=busy_market.id, market="BTC-USDT", side="sell", price="60900", qty="0.01")
    expect(page.locator("#book")).to_contain_text("60,900.00", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#book tr.spread")).to_contain_text("Spread 200.000000")  # 60000 ask, 59800 bid

    # Another trader sells into the resting order: the fill arrives without a reload, in two parts.
    order_place(user_id=busy_market.id, market="BTC-USDT", side="sell", price="59800", qty="0.02")
    expect(page.locator(".toast").last).to_contain_text(
        f"order #{resting.id} partly filled: 0.02000000 at 59800.000000"
    )
    expect(page.locator(f"#open-orders tr[data-order='{resting.id}'] [data-field='filled']")).to_have_text(
        "0.02", timeout=LIVE_TIMEOUT_MS
    )
    order_place(user_id=busy_market.id, market="BTC-USDT", side="sell", price="59800", qty="0.03")
    expect(page.locator(".toast").last).to_contain_text(
        f"order #{resting.id} filled: 0.03000000 at 59800.000000", timeout=LIVE_TIMEOUT_MS
    )
    expect(page.locator(f"#open-orders tr[data-order='{resting.id}']")).to_have_count(0, timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#book tr.own")).to_have_count(0, timeout=LIVE_TIMEOUT_MS)
    expect(balance_cell(page, "#market-balances", "BTC", "available")).to_have_text("0.04995")  # less 0.1 % fee
    expect(balance_cell(page, "#market-balances", "USDT", "held")).to_have_text("0", timeout=LIVE_TIMEOUT_MS)

    # The 24-hour strip follows the ticker stream, formatted as the server renders it (at the tick, grouped;
    # the volume at BTC's display places, trimmed): the raw stream values once replaced the formatted ones.
    expect(page.locator("#ticker-strip [data-field='last']")).to_have_text("59,800.00", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#ticker-strip [data-field='low']")).to_have_text("59,800.00", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#ticker-strip [data-field='volume']")).to_have_text("0.07", timeout=LIVE_TIMEOUT_MS)

    # The fills' candle arrived on the kline stream (or, past a minute's end, the relay's 2 s push of the flat
    # candle after it); the 5m switch loads the 5m candles.
    latest = candles(market="BTC-USDT", interval="1m")[-1]
    page.wait_for_function(
        "opened => Number(document.querySelector('#market-live').dataset.lastKline || 0) >= opened",
        arg=int(latest.open_time.timestamp() * 1000),
        timeout=LIVE_TIMEOUT_MS,
    )
    page.click("#intervals button[data-interval='5m']")
    expect(page.locator("#intervals button[data-interval='5m']")).to_have_attribute(
        "aria-pressed", "true", timeout=LIVE_TIMEOUT_MS
    )
    expect(live).to_have_attribute(
        "data-candles", str(len(candles(market="BTC-USDT", interval="5m"))), timeout=LIVE_TIMEOUT_MS
    )
    page.screenshot(path=str(SCREENSHOT.with_name("market-page-live.png")), full_page=True)
