"""API keys (issue 14, hole 7): the token endpoint's scopes and second factor, expiry, IP allow-lists,
and the HMAC signing secret stored encrypted."""

import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections, transaction
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts.errors import PasswordChanged
from apps.accounts.models import ApiKey
from apps.accounts.password_resets import RESET, password_change_record
from apps.accounts.secret_box import SecretUnreadable, secret_open, secret_seal
from apps.accounts.services import api_key_create, api_key_signing_secret
from apps.core.errors import DomainError, NotFound
from apps.ledger.tests.factories import UserFactory
from apps.wallets.custody.simnet import new_address
from apps.wallets.tests.conftest import wait_for

from .otp import code_now, enrol_device

PASSWORD = "correct horse battery staple"
TOKEN = "/api/v1/auth/token/"


@pytest.fixture
def alice(db):
    return UserFactory(username="alice")


def log_in(api, **body):
    return api.post(TOKEN, {"username": "alice", "password": PASSWORD, **body}, format="json")


# The token endpoint -------------------------------------------------------------------------------


def test_the_token_endpoint_answers_token_secret_scopes_and_expiry(api, alice):
    before = timezone.now()
    response = log_in(api, scopes=["read", "trade"], expires_in=3600, name="my bot")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"token", "secret", "scopes", "expires_at"}
    assert body["scopes"] == ["read", "trade"]
    key = ApiKey.objects.get()
    assert key.name == "my bot"
    assert before + timedelta(seconds=3599) < key.expires_at <= timezone.now() + timedelta(seconds=3600)
    assert body["expires_at"] == key.expires_at.isoformat().replace("+00:00", "Z")
    assert len(body["secret"]) == 64
    assert api_key_signing_secret(key=key) == body["secret"]


def test_each_call_mints_a_new_key(api, alice):
    first, second = log_in(api).json()["token"], log_in(api).json()["token"]
    assert first != second
    assert ApiKey.objects.count() == 2


def test_a_keys_prefix_has_64_random_bits(api, alice):
    """The prefix is unique among every key ever made: at 32 bits two keys would, in time, draw the same one, and the
    second's creation fail (break-it review)."""
    token = log_in(api).json()["token"]
    _, prefix, _ = token.split("_", 2)
    assert prefix == ApiKey.objects.get().prefix
    assert len(prefix) == 16 and int(prefix, 16) >= 0


def test_the_withdraw_scope_needs_a_second_factor_the_user_must_enrol_first(api, alice):
    response = log_in(api, scopes=["read", "withdraw"])

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "second_factor_required"
    assert "otp" in response.json()["error"]["fields"]
    assert not ApiKey.objects.exists()


def test_the_withdraw_scope_with_a_valid_code_is_granted(api, alice):
    device = enrol_device(alice)

    response = log_in(api, scopes=["read", "trade", "withdraw"], otp=code_now(device))

    assert response.status_code == 200
    assert response.json()["scopes"] == ["read", "trade", "withdraw"]


@pytest.mark.parametrize("otp", [None, "", "000000x", "123456"])
def test_the_withdraw_scope_with_a_missing_or_wrong_code_is_refused(api, alice, otp):
    device = enrol_device(alice)
    if otp == "123456" and code_now(device) == "123456":
        otp = "654321"
    body = {"scopes": ["withdraw"]} | ({"otp": otp} if otp is not None else {})

    response = log_in(api, **body)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_otp"
    assert not ApiKey.objects.exists()


def test_once_a_user_has_a_second_factor_every_scope_needs_the_code(api, alice):
    device = enrol_device(alice)

    refused = log_in(api)
    granted = log_in(api, otp=code_now(device))

    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_otp"
    assert granted.status_code == 200
    assert granted.json()["scopes"] == ["read"]


def test_a_code_cannot_be_used_twice(api, alice):
    device = enrol_device(alice)
    code = code_now(device)
    assert log_in(api, otp=code).status_code == 200
    assert log_in(api, otp=code).status_code == 400


def test_a_wrong_password_with_a_valid_code_is_401(api, alice):
    device = enrol_device(alice)
    response = api.post(TOKEN, {"username": "alice", "password": "nope", "otp": code_now(device)}, format="json")
    assert response.status_code == 401
    assert not ApiKey.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scopes": ["admin"]}, "scopes"),
        ({"scopes": []}, "scopes"),
        ({"scopes": "read"}, "scopes"),
        ({"expires_in": 10}, "expires_in"),
        ({"expires_in": 10**12}, "expires_in"),
        ({"expires_in": "soon"}, "expires_in"),
        ({"name": "x" * 101}, "name"),
        ({"name": "bad\x00name"}, "name"),
        ({"allowed_ips": ["not-an-ip"]}, "allowed_ips"),
        ({"allowed_ips": ["fe80::1%eth0"]}, "allowed_ips"),  # a zone: no client address carries one (review)
        ({"allowed_ips": "203.0.113.7"}, "allowed_ips"),
        ({"allowed_ips": [f"203.0.113.{n}" for n in range(21)]}, "allowed_ips"),
        ({"allowed_ips": [{"ip": "203.0.113.7"}]}, "allowed_ips"),
        ({"withdrawal_addresses": ["not an address"]}, "withdrawal_addresses"),
        ({"withdrawal_addresses": "sim1x"}, "withdrawal_addresses"),
    ],
)
def test_bad_token_requests_name_the_field_and_mint_nothing(api, alice, body, field):
    response = log_in(api, **body)
    assert response.status_code == 400
    assert any(name.split(".")[0] == field for name in response.json()["error"]["fields"])
    assert not ApiKey.objects.exists()


def test_a_key_name_with_a_hidden_character_is_refused_saying_so(api, alice):
    """Break-it review: a right-to-left override in a key's name was refused as "A name of 1 to 100 characters"."""
    response = log_in(api, name="bot\u202egnp.exe")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "name": "Control and invisible formatting characters are not allowed."
    }
    assert not ApiKey.objects.exists()


# Expiry and IP allow-lists --------------------------------------------------------------------------


def test_the_token_endpoint_sets_an_ip_allow_list_and_a_withdrawal_allow_list(api, alice):
    address = new_address()
    response = log_in(api, allowed_ips=["203.0.113.7", "198.51.100.0/24"], withdrawal_addresses=[address])

    assert response.status_code == 200
    key = ApiKey.objects.get()
    assert (key.allowed_ips, key.withdrawal_addresses) == (["198.51.100.0/24", "203.0.113.7/32"], [address])
    api.credentials(HTTP_AUTHORIZATION=f"Token {response.json()['token']}")
    assert api.get("/api/v1/balances/", REMOTE_ADDR="198.51.100.99").status_code == 200
    refused = api.get("/api/v1/balances/", REMOTE_ADDR="192.0.2.1")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "permission_denied"


def test_without_allow_lists_the_token_endpoint_makes_a_key_accepted_from_anywhere(api, alice):
    assert log_in(api).status_code == 200
    assert (ApiKey.objects.get().allowed_ips, ApiKey.objects.get().withdrawal_addresses) == ([], [])


def test_an_expired_key_authenticates_nothing(api, alice):
    created = api_key_create(user_id=alice.id, name="short", scopes=["read"], expires_in=60)
    api.credentials(HTTP_AUTHORIZATION=f"Token {created.raw_key}")
    assert api.get("/api/v1/balances/").status_code == 200

    ApiKey.objects.filter(pk=created.key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    response = api.get("/api/v1/balances/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_a_key_with_an_ip_allow_list_refuses_other_addresses(api, alice):
    created = api_key_create(
        user_id=alice.id, name="office", scopes=["read"], allowed_ips=["203.0.113.7", "198.51.100.0/24"]
    )
    assert created.key.allowed_ips == ["198.51.100.0/24", "203.0.113.7/32"]
    api.credentials(HTTP_AUTHORIZATION=f"Token {created.raw_key}")

    allowed = [api.get("/api/v1/balances/", REMOTE_ADDR=ip).status_code for ip in ("203.0.113.7", "198.51.100.99")]
    refused = api.get("/api/v1/balances/", REMOTE_ADDR="203.0.113.8")

    assert allowed == [200, 200]
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "permission_denied"
    assert "203.0.113.8" in refused.json()["error"]["message"]


def test_a_forged_forwarded_for_does_not_pass_an_ip_allow_list(api, alice):
    created = api_key_create(user_id=alice.id, name="office", scopes=["read"], allowed_ips=["203.0.113.7"])
    api.credentials(HTTP_AUTHORIZATION=f"Token {created.raw_key}")
    response = api.get("/api/v1/balances/", REMOTE_ADDR="192.0.2.1", HTTP_X_FORWARDED_FOR="203.0.113.7")
    assert response.status_code == 403


@override_settings(TRUSTED_PROXY_COUNT=1)
def test_behind_the_proxy_the_allow_list_sees_the_forwarded_client(api, alice):
    created = api_key_create(user_id=alice.id, name="office", scopes=["read"], allowed_ips=["203.0.113.7"])
    api.credentials(HTTP_AUTHORIZATION=f"Token {created.raw_key}")
    response = api.get("/api/v1/balances/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.7")
    assert response.status_code == 200


@pytest.mark.parametrize("entries", [["not-an-ip"], ["203.0.113.7/33"], [f"10.0.0.{n}" for n in range(21)]])
def test_an_ip_allow_list_holds_only_addresses_or_networks(alice, entries):
    with pytest.raises(DomainError) as refused:
        api_key_create(user_id=alice.id, name="x", scopes=["read"], allowed_ips=entries)
    assert "allowed_ips" in refused.value.fields
    assert not ApiKey.objects.exists()


def test_the_last_use_is_recorded(api, alice):
    created = api_key_create(user_id=alice.id, name="bot", scopes=["read"])
    assert created.key.last_used_at is None
    api.credentials(HTTP_AUTHORIZATION=f"Token {created.raw_key}")
    api.get("/api/v1/balances/")
    assert ApiKey.objects.get(pk=created.key.pk).last_used_at is not None


# The signing secret ---------------------------------------------------------------------------------


def test_the_signing_secret_is_stored_encrypted_and_decrypts_for_signature_checks(alice):
    created = api_key_create(user_id=alice.id, name="bot", scopes=["read"])
    stored = ApiKey.objects.get(pk=created.key.pk)

    assert created.secret not in str(stored.__dict__)
    assert stored.signing_secret_sealed.startswith("v1:")
    assert api_key_signing_secret(key=stored) == created.secret


def test_a_sealed_secret_opens_only_with_its_key_and_for_its_own_api_key(settings):
    sealed = secret_seal("s3cret", context="abcd1234")
    with pytest.raises(SecretUnreadable):
        secret_open(sealed, context="ffff0000")  # copied onto another key's row
    settings.API_SECRET_ENCRYPTION_KEY = "another-encryption-key-of-enough-length"
    with pytest.raises(SecretUnreadable):
        secret_open(sealed, context="abcd1234")


def test_a_key_without_a_stored_secret_has_none_to_give(alice):
    created = api_key_create(user_id=alice.id, name="old", scopes=["read"])
    ApiKey.objects.filter(pk=created.key.pk).update(signing_secret_sealed="")
    with pytest.raises(NotFound):
        api_key_signing_secret(key=ApiKey.objects.get(pk=created.key.pk))


def test_neither_the_key_nor_its_secret_is_logged(api, alice, caplog):
    caplog.set_level("DEBUG")
    body = log_in(api, scopes=["read"]).json()
    api.credentials(HTTP_AUTHORIZATION=f"Token {body['token']}")
    api.get("/api/v1/balances/")
    api.get("/api/v1/no-such-path/")

    assert caplog.records  # the requests were logged (queries, the 404)
    assert body["secret"] not in caplog.text
    assert body["token"] not in caplog.text


def test_a_key_asked_for_with_a_password_that_changed_meanwhile_is_refused(alice):
    """Break-it review: token requests that proved the old password while a reset committed added 19 keys after it,
    which outlived the reset that revokes every key. The password the caller authenticated with is checked again
    under the lock of the user's row, which the reset holds until it commits."""
    authenticated_with = alice.password
    alice.set_password("a new password after a reset")
    alice.save()
    password_change_record(user_id=alice.id, action=RESET)

    with pytest.raises(PasswordChanged) as refused:
        api_key_create(user_id=alice.id, name="late", scopes=["read"], password_hash=authenticated_with)

    assert (refused.value.code, refused.value.status) == ("not_authenticated", 401)
    assert not ApiKey.objects.filter(user=alice).exists()
    assert api_key_create(user_id=alice.id, name="now", scopes=["read"], password_hash=alice.password).key.pk


@pytest.mark.django_db(transaction=True)
def test_a_token_request_that_proved_the_old_password_gets_no_key_once_a_reset_commits(alice):
    """The same race end to end: the reset holds the user's row (its UPDATE) while a token request, having
    authenticated with the old password, waits for that row to create its key; the reset commits, and the request
    gets 401 and no key (it got one before, which outlived the reset)."""
    holding, release = threading.Event(), threading.Event()

    def reset() -> None:
        try:
            with transaction.atomic():
                user = get_user_model().objects.get(pk=alice.pk)
                user.set_password("a new password after a reset")
                user.save()
                password_change_record(user_id=alice.id, action=RESET)
                holding.set()
                release.wait(30)
        finally:
            connections.close_all()

    answers = []

    def ask() -> None:
        try:
            answers.append(log_in(APIClient()))
        finally:
            connections.close_all()

    resetter = threading.Thread(target=reset)
    resetter.start()
    assert holding.wait(30)
    asker = threading.Thread(target=ask)
    asker.start()
    wait_for(lambda: _waiting_on_a_lock() > 0, timeout=30, message="the token request waiting for the user's row")
    release.set()
    resetter.join(30)
    asker.join(30)

    (answer,) = answers
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "not_authenticated"
    assert not ApiKey.objects.filter(user=alice).exists()


def _waiting_on_a_lock() -> int:
    """Backends of this database waiting for a lock (the token request's, behind the reset's row lock)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]
