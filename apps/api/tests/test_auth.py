import pytest
from django.core.cache import cache
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.accounts.models import ApiKey
from apps.accounts.services import api_key_create, api_key_revoke
from apps.accounts.tests.otp import fresh_code
from apps.audit.models import AuditLogEntry
from apps.core.errors import DomainError
from apps.ledger.tests.factories import UserFactory


def test_token_for_valid_credentials_is_read_only_by_default_and_works(db, api):
    """Issue 14, hole 7: this minted a permanent key with every scope; the default is now read only."""
    UserFactory(username="alice")

    response = api.post(
        "/api/v1/auth/token/", {"username": "alice", "password": "correct horse battery staple"}, format="json"
    )

    assert response.status_code == 200
    token = response.json()["token"]
    assert response.json()["scopes"] == ["read"]
    assert response.json()["expires_at"] is None
    assert ApiKey.objects.get().scopes == ["read"]
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get("/api/v1/balances/").status_code == 200


def test_token_for_a_wrong_password_is_401_in_the_error_shape(db, api):
    UserFactory(username="alice")

    response = api.post("/api/v1/auth/token/", {"username": "alice", "password": "nope"}, format="json")

    assert response.status_code == 401
    assert response.json() == {
        "error": {"code": "not_authenticated", "message": "Invalid username or password.", "fields": {}}
    }
    assert not ApiKey.objects.exists()


def test_token_without_a_password_names_the_field(db, api):
    response = api.post("/api/v1/auth/token/", {"username": "alice"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert "password" in response.json()["error"]["fields"]


def test_keys_are_stored_hashed_and_shown_once(db, user):
    key, raw, _secret = api_key_create(user_id=user.id, name="bot", scopes=["read"])
    stored = ApiKey.objects.get(id=key.id)
    assert raw not in str(stored.__dict__)
    assert raw.startswith(f"ex_{stored.prefix}_")
    assert len(stored.secret_hash) == 64


def test_requests_without_credentials_are_401(db, api):
    response = api.get("/api/v1/balances/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


@pytest.mark.parametrize(
    "header",
    [
        "Token ex_nope_nope",
        "Token",
        "Token a b",
        "Token ex_12345678_wrongsecret",
        "Token ex_a\x00b_abc",  # break-it review: PostgreSQL refused the NUL in the lookup, a 500
        "Token ex_1234567890abcdef0_abc",
    ],
)
def test_malformed_or_unknown_keys_are_401(db, api, header):
    api.credentials(HTTP_AUTHORIZATION=header)
    assert api.get("/api/v1/balances/").status_code == 401


def test_a_revoked_key_is_refused(db, api, user):
    key, raw, _secret = api_key_create(user_id=user.id, name="bot", scopes=["read"])
    api_key_revoke(user_id=user.id, key_id=key.id)
    api.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    assert api.get("/api/v1/balances/").status_code == 401


def test_a_user_cannot_revoke_another_users_key(db, user):
    key = api_key_create(user_id=user.id, name="bot", scopes=["read"]).key
    with pytest.raises(DomainError):
        api_key_revoke(user_id=UserFactory().id, key_id=key.id)
    assert ApiKey.objects.get(id=key.id).revoked_at is None


def test_a_key_without_the_read_scope_cannot_read(db, api_as, user):
    response = api_as(user, "trade").get("/api/v1/balances/")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"


@pytest.mark.parametrize("scopes", [[], ["admin"], ["read", "root"]])
def test_unknown_or_empty_scopes_are_refused(db, user, scopes):
    with pytest.raises(DomainError) as error:
        api_key_create(user_id=user.id, name="x", scopes=scopes)
    assert "scopes" in error.value.fields


def test_login_attempts_are_rate_limited_per_ip(db, api, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "login": "3/min"},
    }
    address = "203.0.113.7"
    cache.delete_many([f"throttle:login:{address}", f"throttle:ip:{address}"])
    statuses = [
        api.post(
            "/api/v1/auth/token/", {"username": "x", "password": "y"}, format="json", REMOTE_ADDR=address
        ).status_code
        for _ in range(4)
    ]
    assert statuses == [401, 401, 401, 429]


@pytest.mark.django_db(transaction=True)
def test_a_lost_database_connection_is_a_json_503_with_retry_after(api_as, user, request):
    client = api_as(user, "read")
    request.getfixturevalue("database_connection_lost")  # after the key is made

    response = client.get("/api/v1/balances/")

    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert response.json()["error"]["code"] == "unavailable"


@pytest.mark.parametrize(
    "addresses",
    [
        ["notanaddress"],
        ["x" * 10000],
        ["sim1" + "0" * 40],  # the last is well-formed but fails its checksum
    ],
)
def test_a_key_allow_list_accepts_only_valid_withdrawal_addresses(db, user, addresses):
    with pytest.raises(DomainError) as error:
        api_key_create(user_id=user.id, name="bot", scopes=["withdraw"], withdrawal_addresses=addresses)
    assert "withdrawal_addresses" in error.value.fields
    assert not ApiKey.objects.exists()


def test_a_key_allow_list_of_valid_addresses_is_kept(db, user):
    from apps.wallets.custody.simnet import new_address

    address = new_address()
    key = api_key_create(
        user_id=user.id, name="bot", scopes=["withdraw"], withdrawal_addresses=[address, address], otp=fresh_code(user)
    ).key
    assert key.withdrawal_addresses == [address]


def test_a_code_used_before_is_refused_without_counting_as_a_wrong_code(db, api):
    """A double click or a client's retry sends the right code again: refused as already used, never a lockout
    (from a break-it review: six requests with one right code gave one token and four 429s)."""
    alice = UserFactory(username="alice")
    code = fresh_code(alice)
    ask = {"username": "alice", "password": "correct horse battery staple", "scopes": ["read"], "otp": code}
    assert api.post("/api/v1/auth/token/", ask, format="json").status_code == 200

    replays = [api.post("/api/v1/auth/token/", ask, format="json") for _ in range(5)]

    assert [(r.status_code, r.json()["error"]["code"]) for r in replays] == [(400, "invalid_otp")] * 5
    assert all("already used" in r.json()["error"]["fields"]["otp"] for r in replays)
    assert TOTPDevice.objects.get(user=alice).throttling_failure_count == 0
    reasons = AuditLogEntry.objects.filter(action="second_factor.failed", object_id=str(alice.id))
    assert [entry.after["reason"] for entry in reasons] == ["already_used"] * 5
    wrong = {**ask, "otp": "000000" if code != "000000" else "111111"}
    assert api.post("/api/v1/auth/token/", wrong, format="json").json()["error"]["code"] == "invalid_otp"
    assert TOTPDevice.objects.get(user=alice).throttling_failure_count == 1  # a wrong code still counts


def test_a_token_with_a_code_used_before_says_it_was_already_used(db, api):
    alice = UserFactory(username="alice")
    code = fresh_code(alice)
    ask = {"username": "alice", "password": "correct horse battery staple", "scopes": ["read"], "otp": code}
    assert api.post("/api/v1/auth/token/", ask, format="json").status_code == 200

    replayed = api.post("/api/v1/auth/token/", ask, format="json")

    assert replayed.status_code == 400
    error = replayed.json()["error"]
    assert error["code"] == "invalid_otp" and "already used" in error["fields"]["otp"]
    assert ApiKey.objects.count() == 1


@pytest.mark.parametrize("path", ["/api/v1/auth/token/", "/api/v1/account/otp/", "/api/v1/account/otp/confirm/"])
def test_a_post_that_shows_a_secret_once_refuses_an_idempotency_key_and_writes_nothing(db, api_as, path):
    api = api_as(UserFactory(username="alice"), "read", "withdraw")
    body = {"username": "alice", "password": "correct horse battery staple", "otp": "123456"}
    before = (ApiKey.objects.count(), list(TOTPDevice.objects.values_list("id", "key", "confirmed")))

    response = api.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert list(response.json()["error"]["fields"]) == ["Idempotency-Key"]
    assert (ApiKey.objects.count(), list(TOTPDevice.objects.values_list("id", "key", "confirmed"))) == before


def test_the_answer_showing_a_new_key_and_its_secret_is_never_stored(db, api):
    """Review: a browser or proxy could keep the key and its signing secret; ``Cache-Control: no-store``."""
    UserFactory(username="alice")

    response = api.post(
        "/api/v1/auth/token/", {"username": "alice", "password": "correct horse battery staple"}, format="json"
    )

    assert response.status_code == 200 and response.json()["secret"]
    assert "no-store" in response.get("Cache-Control", "")
