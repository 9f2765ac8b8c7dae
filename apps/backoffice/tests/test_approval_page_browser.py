"""The approval page in a real browser (Playwright driving Debian's Chromium): the destination address is
large, monospaced and of the highest contrast in the light and the dark admin theme.

A screenshot is saved to ``artifacts/withdrawal-approval.png``.
"""

from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client
from playwright.sync_api import sync_playwright

from apps.backoffice.tests.logins import login_with_second_factor
from apps.ledger.tests.factories import UserFactory
from apps.wallets.custody.simnet import new_address
from apps.wallets.services import withdrawal_request
from apps.wallets.tests.factories import book_address, deposit_through_custody
from devtools.chromium import CHROMIUM, CHROMIUM_ARGS

SCREENSHOT = Path(settings.BASE_DIR) / "artifacts" / "withdrawal-approval.png"

pytestmark = pytest.mark.django_db(transaction=True)

# The address box's computed font, size and colours, read by the browser.
STYLE = """(element) => {
    const style = getComputedStyle(element);
    return {family: style.fontFamily, size: parseFloat(style.fontSize), color: style.color, background: style.backgroundColor};
}"""


def luminance(rgb: str) -> float:
    """WCAG relative luminance of a CSS ``rgb(r, g, b)`` colour."""
    channels = [int(part) / 255 for part in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(first: str, second: str) -> float:
    lighter, darker = sorted((luminance(first), luminance(second)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


@pytest.fixture
def awaiting(transactional_db, usdt):
    type(usdt).objects.filter(pk=usdt.pk).update(
        withdrawal_auto_approve_limit=Decimal(100), withdrawal_daily_limit=Decimal(10_000)
    )
    customer = UserFactory()
    deposit_through_custody(customer, usdt, "1000")
    address = book_address(customer, usdt, new_address()).address
    return withdrawal_request(user_id=customer.id, asset_code="USDT", amount="150", address=address)


@pytest.mark.browser
def test_the_destination_address_is_large_monospaced_and_of_the_highest_contrast(live_server, awaiting, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    approver = login_with_second_factor(Client(), UserFactory(is_staff=True, is_superuser=True))
    session = approver.cookies[settings.SESSION_COOKIE_NAME].value
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": live_server.url}])
            page.goto(f"{live_server.url}/admin/backoffice/withdrawalapproval/{awaiting.id}/change/")
            box = page.locator("#destination-address")
            assert box.inner_text() == awaiting.address
            SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
            for scheme in ("light", "dark"):
                page.emulate_media(color_scheme=scheme)
                style = box.evaluate(STYLE)
                assert "monospace" in style["family"], scheme
                assert style["size"] >= 20, scheme
                assert contrast(style["color"], style["background"]) >= 7, (scheme, style)  # WCAG AAA
        finally:
            browser.close()
            connections.close_all()
