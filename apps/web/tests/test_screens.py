"""Every trader page and every back-office screen at 1440 x 900 in a real browser: a screenshot of each under
``artifacts/screens/``, and nothing that needs a horizontal scroll.

For each page: the document and the ``<main>`` element do not scroll sideways, and no table is wider than
the box that holds it (``scrollWidth <= clientWidth``), so no column is clipped or hidden behind a scroll
bar. One browser, one live server, one log-in per role (a trader; an approver, who sees every back-office
screen and enrols the second factor through the page like a person would).
"""

from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.models import Group, Permission
from django.db import connections
from django.test import RequestFactory
from django.urls import reverse
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice
from playwright.sync_api import sync_playwright

from apps.accounts.services import api_key_create
from apps.audit.services import audit_record
from apps.backoffice.groups import GROUP_PERMISSIONS
from apps.backoffice.services import adjustment_draft, reconciliation_run
from apps.ledger.models import AccountKind
from apps.ledger.seal.services import journal_seal
from apps.ledger.services import Leg, system_account, user_account
from apps.ledger.tests.factories import AssetFactory, UserFactory
from apps.orders.services import market_create, market_halt, order_place
from apps.proofs.services import liabilities_snapshot_take
from apps.wallets.custody import simnet
from apps.wallets.services import withdrawal_request
from apps.wallets.tests.factories import book_address, deposit_through_custody
from devtools.chromium import CHROMIUM, CHROMIUM_ARGS

SCREENS = Path(settings.BASE_DIR) / "artifacts" / "screens"
PASSWORD = "a long and unusual passphrase 42"
VIEWPORT = {"width": 1440, "height": 900}
D = Decimal

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

# Run in the page: what scrolls sideways. A table's box is its parent element (a card, Django admin's results).
OVERFLOWS = """() => {
  const wide = (el) => el.scrollWidth > el.clientWidth + 1;
  const problems = [];
  const page = document.scrollingElement;
  if (wide(page)) problems.push(`page ${page.scrollWidth} > ${page.clientWidth}`);
  const main = document.querySelector("main");
  if (!main) problems.push("no <main>");
  else if (wide(main)) problems.push(`main ${main.scrollWidth} > ${main.clientWidth}`);
  document.querySelectorAll("table").forEach((table, n) => {
    const box = table.parentElement;
    if (table.offsetParent !== null && wide(box))
      problems.push(`table ${table.id || n} in ${box.tagName}.${box.className}: ${box.scrollWidth} > ${box.clientWidth}`);
  });
  return problems;
}"""


def _groups() -> None:
    """The operators' groups (a transactional test's flush may have removed what their data migration wrote)."""
    for name, codenames in GROUP_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=name)
        for dotted in codenames:
            app_label, codename = dotted.split(".")
            group.permissions.add(*Permission.objects.filter(content_type__app_label=app_label, codename=codename))


@pytest.fixture
def exchange(transactional_db):
    """Something on every screen: BTC, ETH (18 decimals, shown with 8), USDT; BTC-USDT, ETH-BTC, a halted ETH-USDT;
    resting orders, fills, deposits, withdrawals (one awaiting approval), an adjustment, reconciliation runs, a
    liabilities snapshot."""
    _groups()
    btc = AssetFactory(code="BTC", name="Bitcoin", decimals=8, withdrawal_daily_limit=D(10), min_withdrawal=D("0.001"))
    eth = AssetFactory(code="ETH", name="Ether", decimals=18, display_decimals=8, withdrawal_daily_limit=D(1000))
    usdt = AssetFactory(
        code="USDT",
        name="Tether USD",
        decimals=6,
        display_decimals=2,
        withdrawal_fee=D(1),
        min_withdrawal=D(10),
        withdrawal_auto_approve_limit=D(1000),
        withdrawal_daily_limit=D(1_000_000),
    )
    from apps.orders.models import FeeSchedule

    if not FeeSchedule.objects.filter(is_default=True).exists():  # the migration's, unless a flush removed it
        FeeSchedule.objects.create(name="default", maker_rate=D("0.001"), taker_rate=D("0.001"), is_default=True)
    market_create(
        base=btc,
        quote=usdt,
        tick_size=D("0.01"),
        step_size=D("0.0001"),
        min_qty=D("0.0001"),
        max_qty=D(100),
        min_notional=D(5),
    )
    market_create(
        base=eth,
        quote=btc,
        tick_size=D("0.00001"),
        step_size=D("0.001"),
        min_qty=D("0.001"),
        max_qty=D(1000),
        min_notional=D("0.0001"),
    )
    eth_usdt = market_create(
        base=eth,
        quote=usdt,
        tick_size=D("0.01"),
        step_size=D("0.0001"),
        min_qty=D("0.001"),
        max_qty=D(1000),
        min_notional=D(5),
    )

    trader = UserFactory(username="trader")
    trader.set_password(PASSWORD)
    trader.save()
    maker = UserFactory(username="maker")
    approver = UserFactory(username="approver", is_staff=True)
    approver.set_password(PASSWORD)
    approver.save()
    approver.groups.add(*Group.objects.filter(name__in=["operators", "approvers"]))
    for user, funds in (
        (trader, ("1.23456789", "12.345678901234567891", "123456.789")),
        (maker, ("50", "900", "3000000")),
    ):
        for asset, amount in zip((btc, eth, usdt), funds, strict=True):
            deposit_through_custody(user, asset, amount)

    for price, qty in (("61234.56", "0.25"), ("60500", "1.5"), ("60010.01", "0.0123")):
        order_place(user_id=maker.id, market="BTC-USDT", side="sell", price=price, qty=qty)
    order_place(user_id=maker.id, market="BTC-USDT", side="buy", price="59999.99", qty="2.5")
    order_place(user_id=maker.id, market="ETH-BTC", side="sell", price="0.05123", qty="12.345")
    order_place(user_id=maker.id, market="ETH-BTC", side="buy", price="0.05001", qty="40")
    order_place(user_id=trader.id, market="BTC-USDT", side="buy", type="market", qty="0.0200")
    order_place(user_id=trader.id, market="BTC-USDT", side="buy", price="58000", qty="0.1", client_order_id="web-1")
    order_place(user_id=trader.id, market="ETH-BTC", side="sell", type="market", qty="1.234")
    order_place(user_id=trader.id, market="ETH-BTC", side="buy", price="0.04999", qty="3")
    market_halt(market_id=eth_usdt.id, operator_id=approver.id, reason="listing next week")

    for amount in ("250.5", "5000"):
        address = book_address(trader, usdt, simnet.new_address()).address
        withdrawal_request(user_id=trader.id, asset_code="USDT", amount=amount, address=address)
    api_key_create(
        user_id=trader.id,
        name="trading bot with a long name",
        scopes=("read", "trade"),
        withdrawal_addresses=[simnet.new_address()],
    )
    equity = system_account(AccountKind.EQUITY, usdt)
    adjustment_draft(
        author_id=maker.id,
        memo="goodwill for ticket 4711, the withdrawal delayed by the outage",
        legs=[Leg(equity.id, D("25")), Leg(user_account(trader.id, usdt).id, D("-25"))],
    )
    audit_record(
        actor_id=approver.id,
        action="market.update",
        object_type="orders.market",
        object_id=eth_usdt.id,
        before={"min_notional": "0E-18", "min_qty": "0.001000000000000000"},
        after={"min_notional": "5.000000000000000000", "min_qty": "0.001000000000000000"},
    )
    reconciliation_run()
    reconciliation_run(triggered_by_id=approver.id)
    journal_seal()
    liabilities_snapshot_take()
    return {"trader": trader, "approver": approver}


@pytest.fixture
def browser(live_server, monkeypatch):
    """One Chromium for the whole test; Django may be called from this thread while Playwright's loop runs in it."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()
            connections.close_all()


def _log_in(browser, live_server, login_url: str, username: str):
    page = browser.new_context(viewport=VIEWPORT, base_url=live_server.url).new_page()
    page.set_default_timeout(20_000)
    page.goto(login_url)
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("[type=submit]")
    return page


def _check(page, name: str, url: str, problems: dict) -> None:
    response = page.goto(url)
    assert response is not None and response.status in (200, 404), (url, response and response.status)
    page.wait_for_load_state("load")
    page.screenshot(path=str(SCREENS / f"{name}.png"), full_page=True)
    found = page.evaluate(OVERFLOWS)
    if found:
        problems[f"{name} ({url})"] = found


def _admin_screens(user) -> list[tuple[str, str]]:
    """Every list ``user`` may see and the change page of its first row, the index and the back office's own
    screens."""
    screens = [("admin-index", reverse("admin:index"))]
    request = RequestFactory().get("/")
    request.user = user
    for model, model_admin in admin.site._registry.items():
        if not user.has_perm(f"{model._meta.app_label}.view_{model._meta.model_name}"):
            continue
        label = f"{model._meta.app_label}_{model._meta.model_name}"
        screens.append((f"admin-{label}-list", reverse(f"admin:{label}_changelist")))
        first = model_admin.get_queryset(request).order_by("pk").first()  # a row the list shows (the approval queue)
        if first is not None:
            screens.append((f"admin-{label}-change", reverse(f"admin:{label}_change", args=[first.pk])))
    screens += [
        ("admin-adjustment-draft", reverse("admin:backoffice_adjustment_add")),
        ("admin-journal-export", reverse("admin:ledger_journalentry_export")),
    ]
    return screens


def test_every_page_fits_at_1440_pixels(exchange, browser, live_server):
    SCREENS.mkdir(parents=True, exist_ok=True)
    problems: dict[str, list[str]] = {}

    # Signed out, then as a trader.
    anonymous = browser.new_context(viewport=VIEWPORT, base_url=live_server.url).new_page()
    for name, url in (
        ("home", "/"),
        ("login", "/accounts/login/"),
        ("signup", "/signup/"),
        ("market-public", "/markets/BTC-USDT/"),
        ("not-found", "/markets/DOGE-USDT/"),
    ):
        _check(anonymous, name, url, problems)
    trader = _log_in(browser, live_server, "/accounts/login/", "trader")
    trader.wait_for_url("**/wallet/")
    for name, url in (
        ("markets", "/markets/"),
        ("market-btc-usdt", "/markets/BTC-USDT/"),
        ("market-eth-btc", "/markets/ETH-BTC/"),
        ("market-halted", "/markets/ETH-USDT/"),
        ("wallet", "/wallet/"),
        ("activity", "/activity/"),
        ("api-keys", "/api-keys/"),
        ("security", "/security/"),
    ):
        _check(trader, name, url, problems)

    # The approver: the second factor's enrolment page, then every screen.
    approver = _log_in(browser, live_server, "/admin/login/", "approver")
    approver.wait_for_url("**/second-factor/**")
    approver.screenshot(path=str(SCREENS / "admin-second-factor.png"), full_page=True)
    found = approver.evaluate(OVERFLOWS)
    if found:
        problems["admin-second-factor"] = found
    device = TOTPDevice.objects.get(user=exchange["approver"])
    approver.fill("#id_token", f"{totp(device.bin_key, step=device.step, t0=device.t0, digits=device.digits):06d}")
    approver.click("[type=submit]")
    approver.wait_for_url(f"**{reverse('admin:index')}")
    for name, url in _admin_screens(exchange["approver"]):
        _check(approver, name, url, problems)

    assert problems == {}, "\n".join(f"{name}: {'; '.join(found)}" for name, found in problems.items())
    assert len(list(SCREENS.glob("*.png"))) >= 40
