"""A Content-Security-Policy on every response, and the pages still work under it in a real browser."""

import pytest
from django.test import Client
from playwright.sync_api import expect

from .test_browser import browser_page  # noqa: F401  (fixture)

POLICY_PARTS = ["default-src 'self'", "script-src 'self'", "object-src 'none'", "frame-ancestors 'none'"]


@pytest.mark.parametrize(
    "path",
    ["/", "/markets/", "/accounts/login/", "/admin/login/", "/api/docs/", "/api/v1/markets/", "/healthz", "/nowhere/"],
)
def test_every_response_carries_the_policy(db, path):
    policy = Client().get(path).headers.get("Content-Security-Policy", "")
    for part in POLICY_PARTS:
        assert part in policy
    assert "unsafe-eval" not in policy
    assert "script-src 'self' 'unsafe-inline'" not in policy


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_trader_ui_the_admin_and_the_api_docs_work_under_the_policy(browser_page, btc_usdt, live_streams):  # noqa: F811
    """Chromium reports every blocked script, style or request on the console; none is blocked, and each page
    does what its scripts do (the market page opens its streams on the streams' own origin, Swagger UI renders
    the schema)."""
    page = browser_page
    refused = []
    page.on("console", lambda message: "Content Security Policy" in message.text and refused.append(message.text))

    with page.expect_websocket(lambda socket: "/stream?streams=" in socket.url):
        page.goto("/markets/BTC-USDT/")  # our own script opens the streams (another port: connect-src allows it)
    page.goto("/admin/login/")
    expect(page.locator("#id_username")).to_be_visible()
    page.goto("/api/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Exchange API")

    assert refused == []
