"""A browser session unused for ``SESSION_IDLE_SECONDS`` is logged out at its next request (apps/accounts/session_idle.py):
real requests, with the session's stored moment of last use moved back instead of waiting."""

import time
from datetime import timedelta

import pytest
from django.contrib.sessions.models import Session
from django.test import Client

from apps.accounts.session_idle import LAST_ACTIVITY_SESSION_KEY
from apps.ledger.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

IDLE = 30 * 60
WALLET_LOGIN = "/accounts/login/?next=/wallet/"
POLL = {"HTTP_HX_REQUEST": "true", "HTTP_X_BACKGROUND_REQUEST": "1"}  # what the wallet's balances poll sends


@pytest.fixture
def browser(db):
    browser, carol = Client(), UserFactory(username="carol")
    browser.force_login(carol)
    return browser


def _last_use(browser: Client, *, seconds_ago: int | None = None) -> int:
    """The moment of the session's last use (seconds since the epoch); first set to ``seconds_ago`` when given."""
    session = browser.session
    if seconds_ago is not None:
        session[LAST_ACTIVITY_SESSION_KEY] = int(time.time()) - seconds_ago
        session.save()
    return session[LAST_ACTIVITY_SESSION_KEY]


def _stored(browser: Client) -> Session:
    return Session.objects.get(session_key=browser.session.session_key)


def test_the_default_idle_timeout_is_thirty_minutes(settings):
    assert settings.SESSION_IDLE_SECONDS == IDLE


def test_the_log_in_is_the_first_use(browser):
    assert abs(_last_use(browser) - time.time()) <= 2


def test_a_session_unused_for_longer_is_logged_out_and_the_log_in_page_says_why(browser):
    _last_use(browser, seconds_ago=IDLE + 1)

    page = browser.get("/wallet/")

    assert (page.status_code, page["Location"]) == (302, WALLET_LOGIN)
    assert "_auth_user_id" not in browser.session
    login = browser.get(page["Location"])
    assert login.status_code == 200
    assert [str(m) for m in login.context["messages"]] == [
        "You were logged out after 30 minutes without activity: log in again."
    ]
    assert "You were logged out after 30 minutes" not in browser.get("/accounts/login/").content.decode()  # once
    assert browser.get("/wallet/")["Location"] == WALLET_LOGIN


def test_a_request_inside_the_window_keeps_the_session_alive_and_moves_it_on(browser):
    for _ in range(3):  # three times almost the whole window: an hour and a half in all, each time used
        _last_use(browser, seconds_ago=IDLE - 10)
        assert browser.get("/wallet/").status_code == 200
        assert abs(_last_use(browser) - time.time()) <= 2


def test_the_moment_is_written_at_most_once_a_minute(browser):
    moved_back = _last_use(browser, seconds_ago=30)
    before = _stored(browser)

    assert browser.get("/wallet/").status_code == 200
    assert browser.get("/security/").status_code == 200

    after = _stored(browser)
    assert _last_use(browser) == moved_back  # not moved on
    assert (after.session_data, after.expire_date) == (before.session_data, before.expire_date)  # not written at all
    _last_use(browser, seconds_ago=61)
    assert browser.get("/wallet/").status_code == 200
    assert abs(_last_use(browser) - time.time()) <= 2


def test_the_absolute_end_twelve_hours_after_the_log_in_stays(browser, settings):
    end = browser.session.get_expiry_date()
    assert abs(end - (_stored(browser).expire_date)) < timedelta(seconds=1)
    _last_use(browser, seconds_ago=IDLE - 10)

    assert browser.get("/wallet/").status_code == 200

    assert abs(_last_use(browser) - time.time()) <= 2  # written, with the same end
    assert browser.session.get_expiry_date() == end and _stored(browser).expire_date == end
    assert settings.SESSION_COOKIE_AGE == 12 * 3600


def test_a_page_polling_by_itself_does_not_keep_the_session_alive(browser):
    moved_back = _last_use(browser, seconds_ago=IDLE - 60)

    poll = browser.get("/wallet/", **POLL)

    assert poll.status_code == 200 and poll.templates[0].name == "web/_balances.html"  # the table alone
    assert _last_use(browser) == moved_back
    _last_use(browser, seconds_ago=IDLE + 1)
    expired = browser.get("/wallet/", **POLL)  # the whole page goes to the log-in page, not the balances box
    assert (expired.status_code, expired["HX-Redirect"]) == (200, WALLET_LOGIN) and expired.content == b""
    assert "_auth_user_id" not in browser.session
    assert browser.get("/wallet/", **POLL)["HX-Redirect"] == WALLET_LOGIN  # and at every poll after
    page = browser.get(WALLET_LOGIN)  # where htmx sends the browser: the reason is still to be told
    assert "You were logged out after 30 minutes without activity" in page.content.decode()


def test_the_session_api_of_an_idle_session_refuses_and_api_keys_are_not_touched(browser, api_as):
    key = api_as(UserFactory(username="dave"), "read")
    _last_use(browser, seconds_ago=IDLE + 1)

    refused = browser.get("/api/v1/balances/")

    assert refused.status_code in (401, 403) and "_auth_user_id" not in browser.session
    assert key.get("/api/v1/balances/").status_code == 200


def test_a_session_with_no_moment_is_logged_out(browser):
    session = browser.session
    del session[LAST_ACTIVITY_SESSION_KEY]
    session.save()

    assert browser.get("/wallet/")["Location"] == WALLET_LOGIN


def test_no_idle_timeout_when_turned_off(browser, settings):
    settings.SESSION_IDLE_SECONDS = 0
    _last_use(browser, seconds_ago=10 * IDLE)

    assert browser.get("/wallet/").status_code == 200


def test_a_shorter_timeout_is_counted_in_its_own_minutes_and_refreshed_within_it(browser, settings):
    settings.SESSION_IDLE_SECONDS = 120
    _last_use(browser, seconds_ago=100)
    assert browser.get("/wallet/").status_code == 200  # used: 100 s > a quarter of the 120 s, so noted
    assert abs(_last_use(browser) - time.time()) <= 2
    _last_use(browser, seconds_ago=121)

    page = browser.get("/wallet/", follow=True)

    assert [str(m) for m in page.context["messages"]] == [
        "You were logged out after 2 minutes without activity: log in again."
    ]
