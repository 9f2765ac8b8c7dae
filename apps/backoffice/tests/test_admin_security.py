"""The back office's doors: staff status to enter any admin page, and a CSRF token on every admin form.

Both tests crawl the admin as a superuser from its index (one page of each kind, following links)
so that pages and forms added later are covered too. The second factor for approvers is in
``test_second_factor.py``.
"""

from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from apps.audit.models import AuditLogEntry
from apps.backoffice.models import Adjustment, ReconciliationRun
from apps.backoffice.services import adjustment_draft, reconciliation_run
from apps.backoffice.tests.logins import login_with_second_factor
from apps.ledger.models import AccountKind
from apps.ledger.services import Leg, system_account, user_account
from apps.ledger.tests.factories import UserFactory
from apps.orders.services import market_create
from apps.wallets.custody.simnet import new_address
from apps.wallets.models import Withdrawal, WithdrawalStatus
from apps.wallets.services import withdrawal_request
from apps.wallets.tests.factories import book_address, deposit_through_custody
from exchange.tests.crawl import CSRF_FIELD, crawl, is_csrf_failure

ADMIN = "/admin/"


@pytest.fixture
def back_office(usdt, btc, user, operator):
    """Something on every back-office page: a withdrawal awaiting approval, another operator's draft adjustment,
    a reconciliation run and a market."""
    type(usdt).objects.filter(pk=usdt.pk).update(
        withdrawal_auto_approve_limit=Decimal(100), withdrawal_daily_limit=Decimal(10_000)
    )
    deposit_through_custody(user, usdt, "1000")
    address = book_address(user, usdt, new_address()).address
    withdrawal = withdrawal_request(user_id=user.id, asset_code="USDT", amount="150", address=address)
    equity = system_account(AccountKind.EQUITY, usdt)
    adjustment = adjustment_draft(
        author_id=operator.id,
        memo="goodwill",
        legs=[Leg(equity.id, Decimal("1")), Leg(user_account(user.id, usdt).id, Decimal("-1"))],
    )
    reconciliation_run()
    market_create(
        base=btc,
        quote=usdt,
        tick_size=Decimal("0.01"),
        step_size=Decimal("0.0001"),
        min_qty=Decimal("0.0001"),
        max_qty=Decimal("100"),
        min_notional=Decimal("5"),
    )
    return {"withdrawal": withdrawal, "adjustment": adjustment}


def crawl_admin(client: Client, back_office: dict):
    """Every kind of admin page and POST form a superuser reaches from the index."""
    starts = [
        ADMIN,
        f"{ADMIN}second-factor/",
        f"{ADMIN}password_change/",
        f"{ADMIN}backoffice/withdrawalapproval/{back_office['withdrawal'].id}/change/",
        f"{ADMIN}backoffice/adjustment/{back_office['adjustment'].id}/change/",
    ]
    return crawl(client, starts, inside=ADMIN, skip=(f"{ADMIN}logout/",))


def test_every_admin_form_needs_the_csrf_token(back_office):
    browser = Client(enforce_csrf_checks=True)
    forms = crawl(browser, ["/accounts/login/"], inside="/accounts/login/").forms  # the admin's log-in too
    login_with_second_factor(browser, UserFactory(username="root", is_staff=True, is_superuser=True))
    forms.update(crawl_admin(browser, back_office).forms)
    forms.update(crawl(browser, ["/accounts/password/change/"], inside="/accounts/password/").forms)  # the admin's

    withdrawal, adjustment = back_office["withdrawal"], back_office["adjustment"]
    assert {
        "/accounts/login/",
        f"{ADMIN}logout/",
        f"{ADMIN}second-factor/",
        "/accounts/password/change/",
        f"{ADMIN}backoffice/withdrawalapproval/<n>/decide/",
        f"{ADMIN}backoffice/withdrawalapproval/",
        f"{ADMIN}backoffice/adjustment/<n>/approve/",
        f"{ADMIN}backoffice/adjustment/<n>/reject/",
        f"{ADMIN}backoffice/adjustment/add/",
        f"{ADMIN}backoffice/reconciliationrun/run/",
        f"{ADMIN}orders/market/",
    } <= forms.keys(), sorted(forms)
    runs = ReconciliationRun.objects.count()
    for kind, form in forms.items():
        assert form.has_csrf_token, f"the form posting to {kind} on {form.page} has no CSRF token"
        fields = {name: value for name, value in form.fields.items() if name != CSRF_FIELD}
        response = browser.post(form.action, fields)
        assert is_csrf_failure(response), f"{kind} accepted a POST without its CSRF token ({response.status_code})"
    assert Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.AWAITING_APPROVAL
    assert Adjustment.objects.get(pk=adjustment.pk).status == adjustment.status
    assert ReconciliationRun.objects.count() == runs


def test_the_admin_is_closed_to_anyone_without_staff_status(back_office):
    """Every admin page and form sends a user without staff status to the admin log-in, even one holding every
    permission (a superuser flag included), and changes nothing."""
    found = crawl_admin(
        login_with_second_factor(Client(), UserFactory(username="root", is_staff=True, is_superuser=True)), back_office
    )
    assert len(found.pages) > 20 and len(found.forms) > 8
    insider = UserFactory(username="insider", is_staff=False, is_superuser=True)
    insider.user_permissions.add(*Permission.objects.all())
    withdrawal, adjustment = back_office["withdrawal"], back_office["adjustment"]
    browsers = [("anonymous", Client()), ("insider", login_with_second_factor(Client(), insider))]
    runs, audits = ReconciliationRun.objects.count(), AuditLogEntry.objects.count()  # after the log-in's own rows

    for who, browser in browsers:
        for url in found.pages:
            response = browser.get(url)
            assert response.status_code == 302 and response.url.startswith(f"{ADMIN}login/"), (who, url)
        for kind, form in found.forms.items():
            response = browser.post(form.action, {k: v for k, v in form.fields.items() if k != CSRF_FIELD})
            login = response.status_code == 302 and response.url.startswith(f"{ADMIN}login/")
            assert login or (kind == f"{ADMIN}logout/" and response.url == ADMIN), (who, kind, response.status_code)

    assert Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.AWAITING_APPROVAL
    assert Adjustment.objects.get(pk=adjustment.pk).status == adjustment.status
    assert (ReconciliationRun.objects.count(), AuditLogEntry.objects.count()) == (runs, audits)


def test_no_one_in_the_back_office_sees_a_traders_authenticator_secret(client, db):
    """Review: django-otp's admin showed any trader's TOTP key and QR code to staff allowed to view devices."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    from apps.accounts.tests.otp import enrol_device

    device = enrol_device(UserFactory(username="trader"))
    login_with_second_factor(client, UserFactory(username="root", is_staff=True, is_superuser=True))

    page = client.get(f"/admin/otp_totp/totpdevice/{device.pk}/change/")

    assert page.status_code == 200
    shown = page.content.decode()
    assert device.key not in shown and device.key.upper() not in shown
    assert f"/admin/otp_totp/totpdevice/{device.pk}/config/" not in shown  # no QR code link either
    assert TOTPDevice.objects.filter(pk=device.pk, key=device.key).exists()
