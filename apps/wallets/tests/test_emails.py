"""E-mail end to end: a real SMTP server (aiosmtpd) in this process, a real Celery worker sending through Django's
SMTP backend (EMAIL_URL), and the links followed from the received messages."""

import uuid
from decimal import Decimal

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from apps.accounts.services import api_key_create
from apps.accounts.tests.mail import body, link_path
from apps.accounts.tests.otp import fresh_code
from apps.ledger.tests.factories import UserFactory
from apps.wallets.custody.simnet import new_address
from apps.wallets.models import Withdrawal, WithdrawalAddress, WithdrawalStatus
from apps.wallets.services import withdrawal_reject, withdrawal_request

from .conftest import make_operator, wait_for
from .factories import book_address, deposit_through_custody

RECIPIENT = "rejected-wallet-trader@example.com"


@pytest.fixture
def mail_worker(workers, smtp_server):
    """A worker whose e-mail goes to the test's SMTP server."""
    return workers.start(env={"EMAIL_URL": smtp_server.url})


def messages_to(smtp_server, subject: str, to: str = "wallet-trader@example.com"):
    """Wait for the messages to ``to`` whose subject starts with ``subject``; return them. (Other tests' tasks
    left in the session's queue may send to their own users meanwhile.)"""

    def found():
        return [message for message in smtp_server.mailbox.with_subject(subject) if message["To"] == to]

    return wait_for(found, timeout=60, message=f"an e-mail {subject!r} to {to}")


@pytest.mark.django_db(transaction=True)
def test_address_and_withdrawal_confirmed_by_the_links_received_and_the_user_told_each_step(
    mail_worker, smtp_server, usdt, settings
):
    settings.WITHDRAWAL_ADDRESS_COOLING_OFF_SECONDS = 0
    settings.WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE = {"USDT": Decimal(100)}
    user = UserFactory(email="wallet-trader@example.com")
    deposit_through_custody(user, usdt, "500")
    (credited,) = messages_to(smtp_server, "Deposit credited")
    assert "500.000000 USDT" in body(credited)

    created_key = api_key_create(
        user_id=user.id, name="my bot", scopes=["read", "withdraw"], otp=fresh_code(user)
    )  # the withdraw scope needs the second factor
    raw_key = created_key.raw_key
    (created,) = messages_to(smtp_server, "New API key: my bot")
    assert "read, withdraw" in body(created)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {raw_key}")

    address = new_address()
    assert (
        api.post("/api/v1/withdrawal-addresses/", {"asset": "USDT", "address": address}, format="json").status_code
        == 201
    )
    (confirm_address,) = messages_to(smtp_server, "Confirm your new USDT withdrawal address")
    assert address in body(confirm_address)
    path = link_path(confirm_address, django_settings.SITE_URL)
    browser = APIClient()
    assert browser.get(path).status_code == 200
    assert browser.post(path).status_code == 200
    assert api.get("/api/v1/withdrawal-addresses/").json()[0]["status"] == "active"

    created = api.post("/api/v1/withdrawals/", {"asset": "USDT", "amount": "150", "address": address}, format="json")
    assert created.json()["status"] == "awaiting_confirmation"
    (confirm_withdrawal,) = messages_to(smtp_server, "Confirm your withdrawal of 150.000000 USDT")
    assert browser.post(link_path(confirm_withdrawal, django_settings.SITE_URL)).status_code == 200

    withdrawal = Withdrawal.objects.get(pk=created.json()["id"])
    wait_for(
        lambda: Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.COMPLETED,
        message="the withdrawal to complete",
    )
    (sent,) = messages_to(smtp_server, "Withdrawal sent: 150.000000 USDT")
    assert Withdrawal.objects.get(pk=withdrawal.pk).txid in body(sent)
    assert WithdrawalAddress.objects.get().confirmed_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_rejection_tells_the_operators_reason_and_a_log_in_is_reported(mail_worker, smtp_server, usdt, client):
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=Decimal(10))
    user = UserFactory(email=RECIPIENT)
    deposit_through_custody(user, usdt, "100")
    address = book_address(user, usdt, new_address()).address
    withdrawal = withdrawal_request(user_id=user.id, asset_code="USDT", amount="50", address=address)

    withdrawal_reject(withdrawal_id=withdrawal.pk, operator_id=make_operator().id, reason="Address flagged by AML")

    (rejected,) = messages_to(smtp_server, "Withdrawal rejected: 50.000000 USDT", RECIPIENT)
    assert "Reason: Address flagged by AML" in body(rejected)
    assert "are available again" in body(rejected)

    response = client.post(
        "/accounts/login/",
        {"username": user.username, "password": "correct horse battery staple"},
        HTTP_USER_AGENT="Firefox/140",
    )
    assert response.status_code == 302
    (login,) = messages_to(smtp_server, "New log-in", RECIPIENT)
    assert "127.0.0.1 (Firefox/140)" in body(login)


@pytest.mark.django_db(transaction=True)
def test_a_log_in_behind_the_trusted_proxy_is_reported_with_the_clients_address(
    mail_worker, smtp_server, client, settings
):
    """Review: the e-mail gave ``REMOTE_ADDR``, the proxy's own address behind one (README, "Behind the proxy":
    ``TRUSTED_PROXY_COUNT=1``); it is the client's, as the rate limits and lockouts see it (``exchange.client_ip``),
    never what the client wrote in ``X-Forwarded-For`` itself."""
    settings.TRUSTED_PROXY_COUNT = 1
    user = UserFactory(email="proxied-trader@example.com")

    response = client.post(
        "/accounts/login/",
        {"username": user.username, "password": "correct horse battery staple"},
        REMOTE_ADDR="10.0.0.2",  # the proxy
        HTTP_X_FORWARDED_FOR="198.51.100.66, 203.0.113.9",  # what the client wrote, then what the proxy appended
        HTTP_USER_AGENT="Firefox/140",
    )

    assert response.status_code == 302
    (login,) = messages_to(smtp_server, "New log-in", "proxied-trader@example.com")
    assert "from 203.0.113.9 (Firefox/140)" in body(login)


def sign_up(client, username: str, email: str) -> None:
    response = client.post(
        "/signup/",
        {"username": username, "email": email, "password1": "correct horse battery staple",
         "password2": "correct horse battery staple"},
    )  # fmt: skip
    assert response.status_code == 302
    client.logout()


@pytest.mark.django_db(transaction=True)
def test_an_address_is_set_by_the_link_sent_to_it_and_a_taken_one_is_told_to_its_owner_only(
    mail_worker, smtp_server, usdt, client
):
    users = get_user_model().objects
    sign_up(client, "newcomer", "newcomer@example.com")
    (confirm,) = messages_to(smtp_server, "Confirm your e-mail address", "newcomer@example.com")
    assert "Hello newcomer" in body(confirm)
    path = link_path(confirm, django_settings.SITE_URL)
    assert users.get(username="newcomer").email == ""
    browser = APIClient()
    assert browser.get(path).status_code == 200  # a page with a button: a mail scanner fetching links sets nothing
    assert users.get(username="newcomer").email == ""
    assert (
        "newcomer@example.com</code> is now the e-mail address of the account newcomer"
        in browser.post(path).content.decode()
    )
    assert users.get(username="newcomer").email == "newcomer@example.com"
    assert browser.post(path).status_code == 409  # once

    # The address is taken now: a second sign-up with it is answered alike, and only its owner hears of it.
    sign_up(client, "impostor", "NEWCOMER@example.com")
    (notice,) = messages_to(smtp_server, "This e-mail address already has an account", "newcomer@example.com")
    assert "it already belongs to an account" in body(notice)
    assert "impostor" not in body(notice)  # nothing the asker chose goes to the owner
    assert users.get(username="impostor").email == ""

    # A change from the security page: the current address approves it, then the new one confirms it, and the old
    # one is told.
    newcomer = users.get(username="newcomer")
    client.force_login(newcomer)
    moving = {"email": "moved@example.com", "password": "correct horse battery staple"}
    assert client.post("/security/email/", moving).status_code == 302
    (approve,) = messages_to(smtp_server, "Approve the change of your e-mail address", "newcomer@example.com")
    assert "make moved@example.com your account's e-mail address instead of this one" in body(approve)
    approval = link_path(approve, django_settings.SITE_URL)
    assert browser.get(approval).status_code == 200  # a mail scanner's GET approves nothing
    assert not smtp_server.mailbox.with_subject("Confirm your e-mail address")[1:]  # nothing to the new address yet
    assert "Approved: we sent a message to <code>moved@example.com" in browser.post(approval).content.decode()
    (confirm_move,) = messages_to(smtp_server, "Confirm your e-mail address", "moved@example.com")
    assert browser.post(link_path(confirm_move, django_settings.SITE_URL)).status_code == 200
    (changed,) = messages_to(smtp_server, "Your e-mail address was changed", "newcomer@example.com")
    assert "now moved@example.com" in body(changed)
    assert "someone else holds your account: contact support at once" in body(changed)
    assert "set your own address again" not in body(changed)  # break-it review: that needs the new address's consent
    assert users.get(username="newcomer").email == "moved@example.com"
    assert not smtp_server.mailbox.with_subject("Confirm your e-mail address")[2:]  # no link went to the impostor


@pytest.mark.django_db(transaction=True)
def test_turning_the_second_factor_on_and_off_is_told_by_e_mail(mail_worker, smtp_server, client):
    from django_otp.plugins.otp_totp.models import TOTPDevice

    from apps.accounts.tests.otp import totp_code

    user = UserFactory(email="guarded@example.com")
    client.force_login(user)
    client.post("/security/second-factor/", {"password": "correct horse battery staple"})
    device = TOTPDevice.objects.get(user=user, confirmed=False)
    assert client.post("/security/second-factor/confirm/", {"otp": totp_code(device)}).status_code == 200
    (on,) = messages_to(smtp_server, "Second factor turned on", "guarded@example.com")
    assert "If this was not you" in body(on)

    assert client.post("/security/second-factor/remove/", {"otp": fresh_code(user)}).status_code == 302
    (off,) = messages_to(smtp_server, "Second factor turned off", "guarded@example.com")
    assert "API keys with the withdraw scope" in body(off)


@pytest.mark.django_db(transaction=True)
def test_a_forgotten_password_is_reset_by_the_link_e_mailed_once(mail_worker, smtp_server, client):
    # An address of this run's own: the reset mails to one address are capped per hour in Redis, which outlives a
    # test session (a fourth run within the hour found nothing sent).
    address = f"forgetful.{uuid.uuid4().hex[:12]}@example.com"
    user = UserFactory(username="forgetful", email=address)

    assert client.post("/accounts/password/reset/", {"email": address}).status_code == 302
    (reset,) = messages_to(smtp_server, "Reset your password", address)
    assert "Hello forgetful" in body(reset)
    page = client.get(link_path(reset, django_settings.SITE_URL), follow=True)  # Django moves the token out of the URL
    form_path = page.redirect_chain[-1][0]
    new = {"new_password1": "a brand new passphrase", "new_password2": "a brand new passphrase"}
    assert client.post(form_path, new).status_code == 302

    (told,) = messages_to(smtp_server, "Your password was changed", address)
    assert "every other session of the account was logged out" in body(told)
    user.refresh_from_db()
    assert user.check_password("a brand new passphrase")
    again = client.get(link_path(reset, django_settings.SITE_URL), follow=True)  # the link works once
    assert 'id="link-invalid"' in again.content.decode()
