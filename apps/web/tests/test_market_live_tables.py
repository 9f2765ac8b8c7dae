"""The market page keeps the user's open orders, order history and fills live from the user stream.

In Debian's Chromium (Playwright), with the page never reloaded: an order the user places elsewhere (the
API, another tab) appears under open orders; another trader fills the user's resting order in two parts:
each part gives a notice (a toast) and a row under the fills, and once filled the order leaves the open
orders for the order history. The tables are the server's own rendering, fetched when a report arrives.
"""

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.services import order_place

from .test_browser import LIVE_TIMEOUT_MS, PASSWORD, browser_page, busy_market  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def test_open_orders_history_and_fills_follow_the_user_stream_without_a_reload(
    browser_page,  # noqa: F811 (the imported fixture, requested)
    busy_market,  # noqa: F811
    btc,
    usdt,
    live_streams,
):
    page = browser_page
    trader = UserFactory(username="table-trader")
    trader.set_password(PASSWORD)
    trader.save()
    fund(trader, usdt, "10000")
    page.goto(reverse("login"))
    page.fill("#id_username", "table-trader")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.goto("/markets/BTC-USDT/")
    expect(page.locator("#market-live")).to_have_attribute("data-stream", "open", timeout=LIVE_TIMEOUT_MS)
    page.evaluate("window.notReloaded = true")
    expect(page.locator("#open-orders")).to_contain_text("No open orders.")
    expect(page.locator("#fills")).to_contain_text("No fills yet.")

    # Placed elsewhere: it appears under open orders, as the server shows it.
    resting = order_place(user_id=trader.id, market="BTC-USDT", side="buy", price="59800", qty="0.05")
    row = page.locator(f"#open-orders tr[data-order='{resting.id}']")
    expect(row).to_contain_text("59,800.00", timeout=LIVE_TIMEOUT_MS)
    expect(row.locator("button", has_text="Cancel")).to_be_visible()

    # Partly filled: a notice, a fill row, the open order's filled amount.
    order_place(user_id=busy_market.id, market="BTC-USDT", side="sell", price="59800", qty="0.02")
    expect(page.locator(".toast").last).to_contain_text(f"order #{resting.id} partly filled", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#fills tbody tr")).to_have_count(1, timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#fills tbody tr").first).to_contain_text("0.02")
    expect(row.locator("[data-field='filled']")).to_have_text("0.02", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator(f"#order-history tr[data-order='{resting.id}']")).to_have_count(0)

    # Filled: a notice, a second fill row, and the order moves from open orders to the history.
    order_place(user_id=busy_market.id, market="BTC-USDT", side="sell", price="59800", qty="0.03")
    expect(page.locator(".toast").last).to_contain_text(f"order #{resting.id} filled", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#fills tbody tr")).to_have_count(2, timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#fills tbody tr").first).to_contain_text("0.03")
    history = page.locator(f"#order-history tr[data-order='{resting.id}']")
    expect(history).to_contain_text("Filled", timeout=LIVE_TIMEOUT_MS)
    expect(history.locator("[data-field='average-price']")).to_have_text("59,800.00")
    expect(page.locator(f"#open-orders tr[data-order='{resting.id}']")).to_have_count(0)
    expect(page.locator("#open-orders")).to_contain_text("No open orders.")

    assert page.evaluate("window.notReloaded") is True  # all of it without a reload
