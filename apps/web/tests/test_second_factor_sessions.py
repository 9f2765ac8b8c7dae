"""Turning the second factor on, replacing it or turning it off logs out every other browser session of the trader
(apps/accounts/session_second_factor.py); the session that made the change stays, and API keys keep working."""

import pytest
from django.test import Client
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.accounts.session_second_factor import SECOND_FACTOR_SESSION_KEY
from apps.accounts.tests.otp import enrol, totp_code, user_code
from apps.ledger.tests.factories import PASSWORD

pytestmark = pytest.mark.django_db

LOGIN_PAGE = "/accounts/login/?next=/security/"


def _logged_in(user) -> Client:
    browser = Client()
    browser.force_login(user)
    assert browser.get("/security/").status_code == 200
    return browser


def _logged_out(browser: Client) -> bool:
    """Whether ``browser``'s next page behind the log-in sends it to the log-in page, its session holding no user."""
    page = browser.get("/security/")
    return (page.status_code, page.get("Location")) == (302, LOGIN_PAGE) and "_auth_user_id" not in browser.session


def _balances_with_key(api_as, user):
    client = api_as(user, "read")
    return lambda: client.get("/api/v1/balances/").status_code


def test_turning_the_second_factor_on_logs_out_the_other_sessions_and_keeps_this_one(user, api_as):
    key = _balances_with_key(api_as, user)
    this, other = _logged_in(user), _logged_in(user)
    assert this.post("/security/second-factor/", {"password": PASSWORD}).status_code == 200
    assert not _logged_out(other)  # a set-up in progress changes nothing yet

    confirmed = this.post(
        "/security/second-factor/confirm/", {"otp": totp_code(TOTPDevice.objects.get(user=user, confirmed=False))}
    )

    assert confirmed.status_code == 200 and len(confirmed.context["recovery_codes"]) == 10
    assert "Your other sessions are logged out." in confirmed.content.decode()
    assert this.get("/security/").status_code == 200
    assert _logged_out(other)
    assert key() == 200
    assert _logged_in(user).get("/wallet/").status_code == 200  # a new log-in is bound to the new state


def test_turning_the_second_factor_off_logs_out_the_other_sessions_and_keeps_this_one(user, api_as):
    key = _balances_with_key(api_as, user)
    enrol(user)
    this, other = _logged_in(user), _logged_in(user)

    removed = this.post("/security/second-factor/remove/", {"otp": user_code(user)})

    assert (removed.status_code, removed["Location"]) == (302, "/security/")
    assert not TOTPDevice.objects.filter(user=user).exists()
    page = this.get("/security/")
    assert page.status_code == 200 and "your other sessions are logged out" in page.content.decode()
    assert _logged_out(other)
    assert key() == 200


def test_replacing_the_authenticator_logs_out_the_other_sessions(user):
    enrol(user)
    this, other = _logged_in(user), _logged_in(user)
    assert this.post("/security/second-factor/", {"password": PASSWORD, "otp": user_code(user)}).status_code == 200
    new = TOTPDevice.objects.get(user=user, confirmed=False)

    assert this.post("/security/second-factor/confirm/", {"otp": totp_code(new)}).status_code == 200

    assert list(TOTPDevice.objects.filter(user=user).values_list("pk", flat=True)) == [new.pk]
    assert this.get("/security/").status_code == 200
    assert _logged_out(other)


def test_a_refused_change_logs_nobody_out(user):
    enrol(user)
    this, other = _logged_in(user), _logged_in(user)

    refused = this.post("/security/second-factor/remove/", {"otp": "000000"})

    assert (refused.status_code, refused["Location"]) == (302, "/security/")
    assert TOTPDevice.objects.filter(user=user, confirmed=True).exists()
    assert this.get("/security/").status_code == 200 and other.get("/security/").status_code == 200


def test_a_change_made_by_any_path_ends_the_sessions_bound_to_the_old_state(user):
    """The session is checked against the second factor itself, not told of the change: an authenticator confirmed
    or deleted by a path that keeps no session (the back office's reset, a script) ends every session too."""
    browser = _logged_in(user)
    TOTPDevice.objects.create(user=user, name="authenticator", confirmed=True)
    assert _logged_out(browser)

    browser = _logged_in(user)
    TOTPDevice.objects.filter(user=user).delete()
    assert _logged_out(browser)


def test_a_change_through_the_api_in_a_browser_session_keeps_that_session(user):
    this, other = _logged_in(user), _logged_in(user)
    assert this.post("/api/v1/account/otp/", {"password": PASSWORD}, content_type="application/json").status_code == 200
    device = TOTPDevice.objects.get(user=user, confirmed=False)

    confirmed = this.post("/api/v1/account/otp/confirm/", {"otp": totp_code(device)}, content_type="application/json")

    assert confirmed.status_code == 200 and confirmed.json()["enabled"] is True
    assert this.get("/security/").status_code == 200
    assert _logged_out(other)


def test_a_session_not_bound_to_a_second_factor_is_logged_out(user):
    """A session logged in before the check existed has no fingerprint: it logs in again."""
    browser = _logged_in(user)
    session = browser.session
    del session[SECOND_FACTOR_SESSION_KEY]
    session.save()

    assert _logged_out(browser)


def test_a_change_undone_before_the_other_sessions_next_request_still_ends_it(user):
    """Break-it review: turned on, then off before the other session's next request, the authenticators ended as they
    were, and the other session matched them again. The count of changes is bound too."""
    this, other = _logged_in(user), _logged_in(user)
    assert this.post("/security/second-factor/", {"password": PASSWORD}).status_code == 200
    confirming = TOTPDevice.objects.get(user=user, confirmed=False)
    assert this.post("/security/second-factor/confirm/", {"otp": totp_code(confirming)}).status_code == 200

    removed = this.post("/security/second-factor/remove/", {"otp": user_code(user)})

    assert (removed.status_code, removed["Location"]) == (302, "/security/")
    assert not TOTPDevice.objects.filter(user=user).exists()  # as when the other session logged in
    assert this.get("/security/").status_code == 200
    assert _logged_out(other)
