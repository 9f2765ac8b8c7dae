from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from apps.accounts.tests.mail import body
from apps.audit.models import AuditLogEntry
from apps.ledger.tests.factories import PASSWORD, UserFactory


@override_settings(AXES_FAILURE_LIMIT=3)
def test_repeated_failed_log_ins_lock_the_account_for_that_address(db, client):
    UserFactory(username="erin")
    statuses = [
        client.post("/accounts/login/", {"username": "erin", "password": "wrong"}).status_code for _ in range(3)
    ]

    locked = client.post("/accounts/login/", {"username": "erin", "password": PASSWORD})

    assert statuses == [200, 200, 429]
    assert locked.status_code == 429
    assert "Too many failed log-ins" in locked.content.decode()
    assert client.get("/wallet/").status_code == 302  # not logged in


@override_settings(AXES_FAILURE_LIMIT=3)
def test_api_token_log_ins_count_towards_the_lock(db, api):
    UserFactory(username="erin")
    for _ in range(3):
        api.post("/api/v1/auth/token/", {"username": "erin", "password": "x"}, format="json")

    locked = api.post("/api/v1/auth/token/", {"username": "erin", "password": PASSWORD}, format="json")

    assert locked.status_code == 429
    assert locked.json()["error"]["code"] == "rate_limited"


@override_settings(AXES_FAILURE_LIMIT=3)
def test_a_successful_log_in_resets_the_count(db, client):
    UserFactory(username="erin")
    for _ in range(2):
        client.post("/accounts/login/", {"username": "erin", "password": "wrong"})
    assert client.post("/accounts/login/", {"username": "erin", "password": PASSWORD}).status_code == 302
    client.post("/accounts/logout/")
    for _ in range(2):
        client.post("/accounts/login/", {"username": "erin", "password": "wrong"})
    assert client.post("/accounts/login/", {"username": "erin", "password": PASSWORD}).status_code == 302


@override_settings(AXES_FAILURE_LIMIT=3)
def test_an_api_lockout_under_a_url_prefix_is_json(db, api):
    """Mounted under SCRIPT_NAME, request.path starts with the prefix: the API's lockout is still in its shape."""
    UserFactory(username="erin")
    for _ in range(3):
        api.post("/api/v1/auth/token/", {"username": "erin", "password": "x"}, format="json", SCRIPT_NAME="/exchange")

    locked = api.post(
        "/api/v1/auth/token/", {"username": "erin", "password": PASSWORD}, format="json", SCRIPT_NAME="/exchange"
    )

    assert locked.status_code == 429
    assert locked.json()["error"]["code"] == "rate_limited"


# The account-level lock (apps.accounts.lockout.AccountLockoutHandler): review "unlimited password guessing per
# account from rotating addresses": 4 wrong passwords from each of 30 addresses all got 401, then the right one a key.


def address(n: int) -> str:
    return f"127.9.0.{n}"


def token_log_in(api, n: int, password: str):
    return api.post(
        "/api/v1/auth/token/", {"username": "carol", "password": password}, format="json", REMOTE_ADDR=address(n)
    )


def fail_from_addresses(api, count: int) -> list[int]:
    """One wrong password for carol from each of ``count`` addresses (127.9.0.1 ...): the answers' statuses."""
    return [token_log_in(api, n, "wrong").status_code for n in range(1, count + 1)]


def test_failures_from_many_addresses_lock_the_account_from_every_address_right_password_included(
    db, api, client, settings
):
    assert (settings.AXES_FAILURE_LIMIT, settings.AXES_ACCOUNT_FAILURE_LIMIT) == (5, 20)
    UserFactory(username="carol")
    statuses = fail_from_addresses(api, 20)

    by_api = token_log_in(api, 21, PASSWORD)
    by_web = client.post("/accounts/login/", {"username": "carol", "password": PASSWORD}, REMOTE_ADDR=address(22))

    assert statuses == [401] * 19 + [429]  # as axes answers the failure that reaches its limit
    assert (by_api.status_code, by_api.json()["error"]["code"]) == (429, "rate_limited")
    assert "token" not in by_api.json()
    assert by_web.status_code == 429
    assert "Too many failed log-ins" in by_web.content.decode()
    assert client.get("/wallet/").status_code == 302  # not logged in


def test_below_the_account_limit_the_right_password_still_works(db, api):
    UserFactory(username="carol")
    assert fail_from_addresses(api, 19) == [401] * 19

    assert token_log_in(api, 20, PASSWORD).status_code == 200


def test_one_address_is_still_locked_out_after_its_own_five_failures_and_the_account_is_not(db, api):
    UserFactory(username="carol")
    for _ in range(5):
        token_log_in(api, 1, "wrong")

    assert token_log_in(api, 1, PASSWORD).status_code == 429
    assert token_log_in(api, 2, PASSWORD).status_code == 200


def test_failures_past_its_own_lock_from_one_address_never_lock_the_account(db, api, settings):
    """Break-it review: 23 failures from one address (locked out itself at the fifth) reached the account's limit of
    20 and locked the owner out from every address."""
    UserFactory(username="carol")
    for _ in range(settings.AXES_ACCOUNT_FAILURE_LIMIT + 3):
        token_log_in(api, 1, "wrong")

    assert token_log_in(api, 1, PASSWORD).status_code == 429
    assert token_log_in(api, 2, PASSWORD).status_code == 200


def test_the_account_lock_ends_with_the_cool_off(db, api, settings):
    from axes.models import AccessAttempt

    UserFactory(username="carol")
    fail_from_addresses(api, 20)
    assert token_log_in(api, 21, PASSWORD).status_code == 429

    AccessAttempt.objects.filter(username="carol").update(
        attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1)
    )

    assert token_log_in(api, 22, PASSWORD).status_code == 200


def test_a_password_reset_ends_the_lock_of_its_account(db, api, client):
    """Break-it review: an attacker's failures kept the owner locked out for the cool-off right after the owner
    reset the password by the e-mailed link (which proves the account is theirs)."""
    from django.contrib.auth.tokens import default_token_generator
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    carol = UserFactory(username="carol")
    UserFactory(username="dave")
    fail_from_addresses(api, 20)
    for _ in range(5):  # another account's failures are left alone
        api.post(
            "/api/v1/auth/token/", {"username": "dave", "password": "wrong"}, format="json", REMOTE_ADDR=address(0)
        )
    assert token_log_in(api, 21, PASSWORD).status_code == 429

    uid = urlsafe_base64_encode(force_bytes(carol.pk))
    link = client.get(f"/accounts/password/reset/{uid}/{default_token_generator.make_token(carol)}/")
    new = "a brand new horse battery"
    assert client.post(link["Location"], {"new_password1": new, "new_password2": new}).status_code == 302

    assert token_log_in(api, 22, new).status_code == 200
    dave = api.post(
        "/api/v1/auth/token/", {"username": "dave", "password": PASSWORD}, format="json", REMOTE_ADDR=address(0)
    )
    assert dave.status_code == 429


@pytest.fixture
def tasks_run_at_once():
    """Celery tasks run in this process when queued (Celery's ``task_always_eager``), so what a request e-mails
    goes through Django's SMTP backend before the test reads the mailbox."""
    from exchange.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def test_the_owner_is_e_mailed_and_the_lock_audited_once(
    db, api, smtp_server, tasks_run_at_once, django_capture_on_commit_callbacks
):
    carol = UserFactory(username="carol", email="carol@example.com")
    with django_capture_on_commit_callbacks(execute=True):
        fail_from_addresses(api, 20)
        for n in range(21, 26):  # still locked: refused, and counted, but told once
            assert token_log_in(api, n, "wrong").status_code == 429

    (message,) = smtp_server.mailbox.with_subject("Log-in to your account is locked")
    assert message["To"] == "carol@example.com"
    assert "After 20 failed log-ins" in body(message)
    assert "127.9.0.20" in body(message)
    (audited,) = AuditLogEntry.objects.filter(action="login_locked", object_id=str(carol.id))
    assert (audited.after["ip"], audited.after["failures"]) == ("127.9.0.20", 20)


def test_a_username_longer_than_any_account_s_is_a_failed_log_in_not_a_500(db, client):
    """Break-it review: a 256-character username was a 500 (django-axes' row holds 255 characters)."""
    response = client.post("/accounts/login/", {"username": "z" * 256, "password": "wrong"})

    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    failed = AuditLogEntry.objects.get(action="login_failed")
    assert failed.after["username"] == "z" * 150
