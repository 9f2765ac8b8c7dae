"""``/api/v1/stream-token/``: create, keep alive and revoke a user stream key."""

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.accounts.enrolment import second_factor_confirm, second_factor_enrol, second_factor_remove
from apps.accounts.password_resets import CHANGED, RESET, password_change_record
from apps.accounts.second_factor import second_factor_require
from apps.accounts.tests.otp import enrol, totp_code, user_code
from apps.api.base import api_time
from apps.ledger.tests.factories import PASSWORD, UserFactory
from apps.streams.models import StreamToken
from apps.streams.selectors import stream_token_user_id
from apps.streams.services import stream_token_create

pytestmark = pytest.mark.django_db

URL = "/api/v1/stream-token/"


def test_a_read_key_creates_a_stream_key_that_opens_its_users_stream_only(api_as, user):
    response = api_as(user, "read").post(URL)

    assert response.status_code == 201
    key = response.json()["token"]
    assert len(key) == 64 and stream_token_user_id(key=key) == user.id
    assert not StreamToken.objects.filter(key_hash=key).exists()  # stored hashed


def test_without_authentication_there_is_no_stream_key(api):
    response = api.post(URL)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_keep_alive_moves_the_expiry_and_revoke_ends_the_key(api_as, user, settings):
    client = api_as(user, "read")
    key = client.post(URL).json()["token"]
    StreamToken.objects.update(expires_at=timezone.now() + timedelta(seconds=5))

    extended = client.put(URL, {"token": key}, format="json")
    assert extended.status_code == 200
    assert StreamToken.objects.get().expires_at > timezone.now() + timedelta(seconds=settings.STREAMS_TOKEN_TTL - 60)

    assert client.delete(URL, {"token": key}, format="json").status_code == 204
    assert stream_token_user_id(key=key) is None
    gone = client.put(URL, {"token": key}, format="json")
    assert gone.status_code == 404 and gone.json()["error"]["fields"] == {"key": "Unknown or expired."}


def test_an_expired_key_opens_nothing_and_another_users_key_cannot_be_extended(api_as, user):
    from apps.ledger.tests.factories import UserFactory

    key = api_as(user, "read").post(URL).json()["token"]
    other = api_as(UserFactory(), "read")
    assert other.put(URL, {"token": key}, format="json").status_code == 404
    assert other.delete(URL, {"token": key}, format="json").status_code == 404

    StreamToken.objects.update(expires_at=timezone.now())
    assert stream_token_user_id(key=key) is None


def test_a_malformed_body_is_a_400_naming_the_field(api_as, user):
    response = api_as(user, "read").put(URL, {"token": ["x"]}, format="json")
    assert response.status_code == 400
    assert "token" in response.json()["error"]["fields"]


def test_a_stream_key_never_outlives_the_api_key_that_made_it_nor_its_keep_alive(api_as, user):
    from apps.accounts.models import ApiKey

    client = api_as(user, "read")
    key_expiry = timezone.now() + timedelta(seconds=60)
    ApiKey.objects.filter(user=user).update(expires_at=key_expiry)

    created = client.post(URL)
    assert created.status_code == 201
    assert created.json()["expires_at"] == api_time(key_expiry)
    extended = client.put(URL, {"token": created.json()["token"]}, format="json")
    assert extended.json()["expires_at"] == created.json()["expires_at"]
    assert StreamToken.objects.get().expires_at == key_expiry


def test_an_idempotency_key_is_refused_as_the_stream_key_is_shown_once(api_as, user):
    response = api_as(user, "read").post(URL, HTTP_IDEMPOTENCY_KEY="k-1")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert list(response.json()["error"]["fields"]) == ["Idempotency-Key"]
    assert not StreamToken.objects.exists()


def test_answers_showing_a_stream_key_are_never_stored(api_as, user):
    """The key opens the user's private stream: ``Cache-Control: no-store`` on the answers that show it."""
    client = api_as(user, "read")
    created = client.post(URL)
    kept_alive = client.put(URL, {"token": created.json()["token"]}, format="json")

    assert (created.status_code, kept_alive.status_code) == (201, 200)
    assert "no-store" in created.get("Cache-Control", "") and "no-store" in kept_alive.get("Cache-Control", "")


@pytest.mark.parametrize("action", [CHANGED, RESET])
def test_a_password_change_or_reset_ends_the_stream_keys_made_in_browser_sessions(api_as, user, action):
    """Break-it review: a stream key made in a browser session before a reset went on delivering the user's balances
    and deposits, and opened new streams, after it (Django ends the sessions; the key outlived them)."""
    _, in_a_session = stream_token_create(user_id=user.id)
    with_a_key = api_as(user, "read").post(URL).json()["token"]

    password_change_record(user_id=user.id, action=action)

    assert stream_token_user_id(key=in_a_session) is None
    assert stream_token_user_id(key=with_a_key) == (None if action == RESET else user.id)  # its API key decides


@pytest.mark.parametrize("change", ["on", "replaced", "off"])
def test_a_change_of_the_second_factor_ends_the_stream_keys_made_in_browser_sessions(api_as, user, change):
    """Break-it review: the browser sessions logged out by a change of the second factor left their stream keys, so
    a page left open kept its stream for the key's hour."""
    with_a_key = api_as(user, "read").post(URL).json()["token"]
    if change != "on":
        enrol(user)
    _, in_a_session = stream_token_create(user_id=user.id)

    if change == "off":
        second_factor_remove(user_id=user.id, otp=user_code(user))
    else:
        second_factor_enrol(user_id=user.id, otp=user_code(user) if change == "replaced" else None)
        second_factor_confirm(user_id=user.id, otp=totp_code(TOTPDevice.objects.get(user=user, confirmed=False)))

    assert stream_token_user_id(key=in_a_session) is None
    assert stream_token_user_id(key=with_a_key) == user.id


def test_using_or_starting_to_set_up_a_second_factor_leaves_the_stream_keys(user):
    enrol(user)
    _, in_a_session = stream_token_create(user_id=user.id)

    second_factor_require(user_id=user.id, code=user_code(user))  # a code used: django-otp saves the device
    second_factor_enrol(user_id=user.id, otp=user_code(user))  # a replacement begun, not confirmed

    assert stream_token_user_id(key=in_a_session) == user.id


def test_a_log_out_ends_the_stream_keys_made_in_browser_sessions(client, api_as, user):
    """Break-it review: a stream key made in a browser session went on delivering the user's orders, balances and
    log-in notices after the log-out."""
    client.force_login(user)
    in_a_session = client.post(URL, content_type="application/json").json()["token"]
    with_a_key = api_as(user, "read").post(URL).json()["token"]

    client.post("/accounts/logout/")

    assert stream_token_user_id(key=in_a_session) is None
    assert stream_token_user_id(key=with_a_key) == user.id


def test_another_user_logging_in_in_the_same_browser_ends_the_first_ones_stream_keys(client, user):
    """Break-it review: a user switch without a log-out kept the first user's browser stream key (Django's login()
    empties the session without the log-out signal)."""
    client.force_login(user)
    first = client.post(URL, content_type="application/json").json()["token"]
    UserFactory(username="second")

    client.post("/accounts/login/", {"username": "second", "password": PASSWORD})

    assert stream_token_user_id(key=first) is None
    assert client.get("/wallet/").wsgi_request.user.username == "second"


def test_a_key_made_in_a_browser_session_lives_no_longer_than_the_sessions_idle_limit(client, api_as, user, settings):
    """Break-it review: a market page's stream (a key made in the session) ran on for up to an hour after the session's
    idle end, since nothing logged the session out until its next request. Keys made with an API key keep their TTL."""
    settings.SESSION_IDLE_SECONDS, settings.STREAMS_TOKEN_TTL = 600, 3600
    client.force_login(user)

    def lifetime(key: str) -> float:
        expires_at = StreamToken.objects.get(key_hash=hashlib.sha256(key.encode()).hexdigest()).expires_at
        return (expires_at - timezone.now()).total_seconds()

    in_a_session = client.post(URL, content_type="application/json").json()["token"]
    with_a_key = api_as(user, "read").post(URL).json()["token"]
    assert 590 < lifetime(in_a_session) <= 600 and 3590 < lifetime(with_a_key) <= 3600
    assert client.put(URL, {"token": in_a_session}, content_type="application/json").status_code == 200
    assert 590 < lifetime(in_a_session) <= 600  # kept alive by the page: still at most the idle limit
    settings.SESSION_IDLE_SECONDS = 0  # no idle limit: the TTL
    assert 3590 < lifetime(client.post(URL, content_type="application/json").json()["token"]) <= 3600
