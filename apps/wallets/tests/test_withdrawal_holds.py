"""Withdrawals paused after a change of how the account is secured (apps.accounts.holds; break-it review: a phished
password and code gave a withdraw key that outlived the victim's password reset, and nothing paused withdrawals).

A password change or reset, a second factor replaced or removed (by the trader or by an approved reset), and an
e-mail address replaced pause new withdrawals and their e-mailed confirmations for
``WITHDRAWAL_SECURITY_HOLD_SECONDS``; a reset also revokes every API key."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group
from django.contrib.auth.tokens import default_token_generator
from django.template.loader import render_to_string
from django.test import Client, override_settings
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.accounts.email_address import email_address_confirm
from apps.accounts.enrolment import second_factor_confirm, second_factor_enrol, second_factor_remove
from apps.accounts.errors import WithdrawalsOnHold
from apps.accounts.models import ApiKey, HoldReason, WithdrawalHold
from apps.accounts.password_resets import CHANGED, password_change_record
from apps.accounts.services import api_key_create
from apps.accounts.tests.email_links import link_for
from apps.accounts.tests.mail import body
from apps.accounts.tests.otp import enrol, totp_code, user_code
from apps.audit.models import AuditLogEntry
from apps.backoffice.services import second_factor_reset_approve, second_factor_reset_request
from apps.backoffice.tests.logins import login_with_second_factor
from apps.ledger.tests.factories import PASSWORD, UserFactory
from apps.wallets.custody.simnet import new_address
from apps.wallets.links import link_token_make
from apps.wallets.models import Withdrawal, WithdrawalStatus
from apps.wallets.selectors import withdrawals_to_decide
from apps.wallets.services import (
    WITHDRAWALS_PAUSED_HELD,
    withdrawal_approve,
    withdrawal_confirm,
    withdrawal_request,
    withdrawal_submit,
)

from .conftest import wait_for
from .factories import book_address, deposit_through_custody

NEW = "a different horse, still correct"
DESTINATION = new_address()


@pytest.fixture
def trader(usdt):
    """A trader with 1,000 USDT, an active address in the book and an e-mail address."""
    trader = UserFactory(username="carol", email="carol@example.com")
    deposit_through_custody(trader, usdt, "1000")
    book_address(trader, "USDT", DESTINATION)
    return trader


def withdraw(trader, amount: str = "10") -> Withdrawal:
    return withdrawal_request(user_id=trader.id, asset_code="USDT", amount=amount, address=DESTINATION)


def assert_paused(trader, reason: HoldReason, *, since) -> None:
    """New withdrawals are refused, naming when the pause ends (a day after ``since``), and nothing is written."""
    hold = WithdrawalHold.objects.get(user=trader)
    assert hold.reason == reason
    assert since + timedelta(seconds=86400) <= hold.until <= timezone.now() + timedelta(seconds=86400)
    count = Withdrawal.objects.count()
    with pytest.raises(WithdrawalsOnHold) as refused:
        withdraw(trader)
    assert refused.value.code == "withdrawals_on_hold" and refused.value.status == 403
    assert f"paused until {hold.until:%Y-%m-%d %H:%M} UTC" in refused.value.message
    assert Withdrawal.objects.count() == count
    paused = AuditLogEntry.objects.filter(action="withdrawals.paused", object_id=str(trader.id)).latest("id")
    assert paused.after == {"until": hold.until.isoformat(), "reason": reason}


def reset_by_link(client, trader):
    """Follow the e-mailed reset link of ``trader`` and set a new password, as the web page does."""
    uid = urlsafe_base64_encode(force_bytes(trader.pk))
    link = client.get(f"/accounts/password/reset/{uid}/{default_token_generator.make_token(trader)}/")
    assert link.status_code == 302  # Django swaps the token for a session value
    done = client.post(link["Location"], {"new_password1": NEW, "new_password2": NEW})
    assert done.status_code == 302, done.content
    trader.refresh_from_db()
    assert trader.check_password(NEW)


@pytest.fixture
def mail_worker(workers, smtp_server):
    """A Celery worker whose e-mail goes to the test's SMTP server."""
    return workers.start(env={"EMAIL_URL": smtp_server.url})


@pytest.mark.django_db(transaction=True)
def test_a_reset_pauses_withdrawals_revokes_every_api_key_and_says_so(client, api, trader, mail_worker, smtp_server):
    keys = [api_key_create(user_id=trader.id, name=f"bot {n}", scopes=["read", "trade"]) for n in range(2)]
    revoked_before = api_key_create(user_id=trader.id, name="old", scopes=["read"]).key
    ApiKey.objects.filter(pk=revoked_before.pk).update(revoked_at=timezone.now() - timedelta(days=1))
    since = timezone.now()

    reset_by_link(client, trader)

    assert_paused(trader, HoldReason.PASSWORD_RESET, since=since)
    assert not ApiKey.objects.filter(user=trader, revoked_at__isnull=True).exists()
    for new in keys:
        api.credentials(HTTP_AUTHORIZATION=f"Token {new.raw_key}")
        assert api.get("/api/v1/balances/").status_code == 401
    audited = AuditLogEntry.objects.filter(actor=trader, action="api_key.revoked").order_by("object_id")
    assert [(row.object_id, row.before, row.after["reason"]) for row in audited] == [
        (str(new.key.pk), {"revoked_at": None}, "password_reset") for new in keys
    ]  # the key revoked the day before is left as it was
    (told,) = wait_for(
        lambda: [m for m in smtp_server.mailbox.with_subject("Your password was changed") if m["To"] == trader.email],
        timeout=60,
        message="the password e-mail",
    )
    hold = WithdrawalHold.objects.get(user=trader)
    text = " ".join(body(told).split())
    assert "was reset by an e-mailed link" in text
    assert "Its 2 API keys were revoked" in text
    assert f"Withdrawals are paused until {hold.until:%Y-%m-%d %H:%M} UTC" in text


def test_a_change_pauses_withdrawals_and_keeps_the_api_keys(client, api, trader):
    key = api_key_create(user_id=trader.id, name="bot", scopes=["read"])
    client.force_login(trader)
    since = timezone.now()

    changed = client.post(
        "/accounts/password/change/", {"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW}
    )

    assert changed.status_code == 302
    assert_paused(trader, HoldReason.PASSWORD_CHANGED, since=since)
    api.credentials(HTTP_AUTHORIZATION=f"Token {key.raw_key}")
    assert api.get("/api/v1/balances/").status_code == 200


def test_the_pause_ends_and_withdrawals_work_again(trader, settings):
    withdrawals_before = Withdrawal.objects.count()
    trader.set_password(NEW)

    password_change_record(user_id=trader.id, action=CHANGED)
    with pytest.raises(WithdrawalsOnHold):
        withdraw(trader)

    WithdrawalHold.objects.filter(user=trader).update(until=timezone.now() - timedelta(seconds=1))

    assert withdraw(trader).status == WithdrawalStatus.APPROVED
    assert Withdrawal.objects.count() == withdrawals_before + 1


def test_a_pause_of_zero_seconds_is_none(trader, settings):
    settings.WITHDRAWAL_SECURITY_HOLD_SECONDS = 0

    password_change_record(user_id=trader.id, action=CHANGED)

    assert not WithdrawalHold.objects.exists()
    assert withdraw(trader).status == WithdrawalStatus.APPROVED


def test_the_first_second_factor_pauses_nothing_replacing_or_removing_it_does(trader):
    enrol(trader)
    assert not WithdrawalHold.objects.exists()
    assert withdraw(trader).status == WithdrawalStatus.APPROVED

    since = timezone.now()
    second_factor_enrol(user_id=trader.id, otp=user_code(trader))
    second_factor_confirm(user_id=trader.id, otp=totp_code(TOTPDevice.objects.get(user=trader, confirmed=False)))
    assert_paused(trader, HoldReason.SECOND_FACTOR_REPLACED, since=since)
    first_until = WithdrawalHold.objects.get(user=trader).until

    removed_at = timezone.now()
    second_factor_remove(user_id=trader.id, otp=user_code(trader))

    assert_paused(trader, HoldReason.SECOND_FACTOR_REMOVED, since=removed_at)
    assert WithdrawalHold.objects.get(user=trader).until >= first_until  # moved forward, never back


def test_an_approved_second_factor_reset_pauses_withdrawals(trader):
    enrol(trader)
    requester = UserFactory(username="olga", is_staff=True)
    requester.groups.add(Group.objects.get(name="operators"))
    approver = UserFactory(username="arno", is_staff=True)
    approver.groups.add(Group.objects.get(name="operators"), Group.objects.get(name="approvers"))
    reset = second_factor_reset_request(user_id=trader.id, operator_id=requester.id, reason="lost phone, id checked")
    since = timezone.now()

    second_factor_reset_approve(reset_id=reset.pk, approver_id=approver.id)

    assert_paused(trader, HoldReason.SECOND_FACTOR_REMOVED, since=since)


def test_replacing_the_e_mail_address_pauses_withdrawals_setting_the_first_does_not(trader):
    newcomer = UserFactory(email="")
    _confirm_address(newcomer, "newcomer@example.com")
    assert not WithdrawalHold.objects.exists()

    since = timezone.now()
    _confirm_address(trader, "carol@elsewhere.example")

    assert_paused(trader, HoldReason.EMAIL_CHANGED, since=since)


@pytest.mark.parametrize(
    ("template", "context"),
    [
        ("password_changed", {"reset": False}),
        ("second_factor_on", {}),
        ("second_factor_off", {}),
        ("email_changed", {"username": "carol", "email": "carol@elsewhere.example"}),
    ],
)
def test_the_e_mails_of_the_changes_say_until_when_withdrawals_are_paused(template, context):
    until = timezone.now() + timedelta(days=1)
    common = {"time": timezone.now(), "user": UserFactory.build(username="carol")}

    paused = render_to_string(f"emails/{template}.txt", {**common, **context, "held_until": until})
    not_paused = render_to_string(f"emails/{template}.txt", {**common, **context, "held_until": None})

    assert f"Withdrawals are paused until {until:%Y-%m-%d %H:%M} UTC" in paused
    assert "paused" not in not_paused


def test_a_confirmation_link_opened_during_the_pause_is_refused(trader, usdt):
    with override_settings(WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE={"USDT": Decimal(5)}):
        waiting = withdraw(trader)
    assert waiting.status == WithdrawalStatus.AWAITING_CONFIRMATION

    password_change_record(user_id=trader.id, action=CHANGED)

    with pytest.raises(WithdrawalsOnHold):
        withdrawal_confirm(token=link_token_make(purpose="withdrawal", object_id=waiting.pk))
    waiting.refresh_from_db()
    assert waiting.status == WithdrawalStatus.AWAITING_CONFIRMATION


def test_the_api_answers_403_withdrawals_on_hold(api, trader):
    enrol(trader)
    key = api_key_create(user_id=trader.id, name="w", scopes=["read", "withdraw"], otp=user_code(trader))

    password_change_record(user_id=trader.id, action=CHANGED)
    api.credentials(HTTP_AUTHORIZATION=f"Token {key.raw_key}")

    response = api.post(
        "/api/v1/withdrawals/", {"asset": "USDT", "amount": "10", "address": DESTINATION}, format="json"
    )

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "withdrawals_on_hold"
    assert not Withdrawal.objects.filter(user=trader).exists()


def _confirm_address(user, address: str) -> None:
    """Ask for ``address`` as the user's e-mail address and follow the links the messages carry."""
    email_address_confirm(token=link_for(user, address))


def _operators():
    """An operator (customer screens) and an approver (withdrawal approvals), both staff with their groups."""
    operator = UserFactory(username="olga", is_staff=True)
    operator.groups.add(Group.objects.get(name="operators"))
    approver = UserFactory(username="arno", is_staff=True)
    approver.groups.add(Group.objects.get(name="operators"), Group.objects.get(name="approvers"))
    return operator, approver


def test_operators_see_the_pause_and_cannot_approve_during_it(client, trader, usdt):
    """Break-it review: the customer screen said "Withdrawals allowed" during a pause, and a withdrawal awaiting
    approval from before the change could be approved and sent in it."""
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=Decimal(100))
    waiting = withdraw(trader, "150")
    assert waiting.status == WithdrawalStatus.AWAITING_APPROVAL
    operator, approver = _operators()
    password_change_record(user_id=trader.id, action=CHANGED)
    until = WithdrawalHold.objects.get(user=trader).until

    with pytest.raises(WithdrawalsOnHold):
        withdrawal_approve(withdrawal_id=waiting.pk, operator_id=approver.id)

    waiting.refresh_from_db()
    assert waiting.status == WithdrawalStatus.AWAITING_APPROVAL
    client.force_login(operator)
    customer_page = client.get(f"/admin/backoffice/customer/{trader.id}/change/").content.decode()
    assert f"paused until {until:%Y-%m-%d %H:%M} UTC" in customer_page and "password changed" in customer_page
    approval_page = login_with_second_factor(Client(), approver).get(
        f"/admin/backoffice/withdrawalapproval/{waiting.pk}/change/"
    )
    assert 'id="withdrawals-paused"' in approval_page.content.decode()


def test_an_approved_withdrawal_not_sent_yet_is_held_back_during_the_pause_and_sent_after_it(trader):
    approved = withdraw(trader, "10")  # within the auto-approval limit; its submission was not run yet
    assert approved.status == WithdrawalStatus.APPROVED
    password_change_record(user_id=trader.id, action=CHANGED)

    held = withdrawal_submit(withdrawal_id=approved.pk)

    assert (held.status, held.handed_over, held.last_error) == (
        WithdrawalStatus.APPROVED,
        False,
        WITHDRAWALS_PAUSED_HELD,
    )
    assert approved.pk in withdrawals_to_decide().values_list("id", flat=True)  # an operator may reject it
    WithdrawalHold.objects.filter(user=trader).update(until=timezone.now() - timedelta(seconds=1))
    assert withdrawal_submit(withdrawal_id=approved.pk).status == WithdrawalStatus.SUBMITTED
    assert approved.pk not in withdrawals_to_decide().values_list("id", flat=True)
