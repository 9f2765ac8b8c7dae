"""API keys in the audit log (``api_key.created``, ``api_key.revoked``, never a key or secret) and the limit of
``API_KEY_MAX_ACTIVE`` active keys an account (security review: one log-in minted 40 keys, none audited)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts.errors import TooManyApiKeys
from apps.accounts.models import ApiKey
from apps.accounts.services import api_key_create, api_key_revoke
from apps.audit.models import AuditLogEntry
from apps.core.errors import NotFound
from apps.ledger.tests.factories import PASSWORD, UserFactory
from exchange.tests.concurrency import run_concurrently

TOKEN = "/api/v1/auth/token/"


def no_secret_in(entry: AuditLogEntry, key: ApiKey, *secrets: str) -> bool:
    text = f"{entry.before} {entry.after}"
    return all(value not in text for value in (key.secret_hash, key.signing_secret_sealed, *secrets))


def test_a_key_made_through_the_api_is_audited_with_its_settings_and_never_its_secret(api, user):
    response = api.post(
        TOKEN,
        {
            "username": user.username,
            "password": PASSWORD,
            "name": "bot",
            "scopes": ["trade", "read"],
            "expires_in": 3600,
            "allowed_ips": ["203.0.113.7"],
        },
        format="json",
    )

    assert response.status_code == 200
    key = ApiKey.objects.get()
    entry = AuditLogEntry.objects.get(action="api_key.created")
    assert (entry.actor_id, entry.object_type, entry.object_id) == (user.id, "accounts.apikey", str(key.id))
    assert entry.before == {}
    assert entry.after == {
        "name": "bot",
        "prefix": key.prefix,
        "scopes": ["read", "trade"],
        "allowed_ips": ["203.0.113.7/32"],
        "withdrawal_addresses": [],
        "expires_at": key.expires_at.isoformat(),
    }
    assert no_secret_in(entry, key, response.json()["token"], response.json()["secret"])


def test_revoking_is_audited_once_with_the_user_as_actor(user):
    created = api_key_create(user_id=user.id, name="bot", scopes=["read"])

    key = api_key_revoke(user_id=user.id, key_id=created.key.id)
    api_key_revoke(user_id=user.id, key_id=created.key.id)  # again: nothing changes, nothing recorded

    (entry,) = AuditLogEntry.objects.filter(action="api_key.revoked")
    assert (entry.actor_id, entry.object_type, entry.object_id) == (user.id, "accounts.apikey", str(key.id))
    assert entry.before == {"revoked_at": None}
    assert entry.after == {"revoked_at": key.revoked_at.isoformat()}
    assert no_secret_in(entry, key, created.raw_key, created.secret)


def test_another_users_key_is_not_revoked_nor_audited(user):
    created = api_key_create(user_id=UserFactory().id, name="bot", scopes=["read"])

    with pytest.raises(NotFound):
        api_key_revoke(user_id=user.id, key_id=created.key.id)

    assert ApiKey.objects.get().revoked_at is None
    assert not AuditLogEntry.objects.filter(action="api_key.revoked").exists()


def test_the_limit_refuses_the_key_past_it_and_revoked_or_expired_keys_do_not_count(user, settings):
    settings.API_KEY_MAX_ACTIVE = 3
    first = api_key_create(user_id=user.id, name="k1", scopes=["read"]).key
    second = api_key_create(user_id=user.id, name="k2", scopes=["read"]).key
    api_key_create(user_id=user.id, name="k3", scopes=["read"])

    with pytest.raises(TooManyApiKeys) as refused:
        api_key_create(user_id=user.id, name="k4", scopes=["read"])

    assert refused.value.code == "too_many_api_keys" and refused.value.status == 400
    assert "revoke one" in refused.value.message
    assert ApiKey.objects.count() == 3
    assert AuditLogEntry.objects.filter(action="api_key.created").count() == 3
    api_key_revoke(user_id=user.id, key_id=first.id)
    ApiKey.objects.filter(id=second.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    api_key_create(user_id=user.id, name="k4", scopes=["read"])
    api_key_create(user_id=user.id, name="k5", scopes=["read"])
    with pytest.raises(TooManyApiKeys):
        api_key_create(user_id=user.id, name="k6", scopes=["read"])
    assert api_key_create(user_id=UserFactory().id, name="other", scopes=["read"])  # a limit per account


def test_the_token_endpoint_answers_the_limit_as_a_400_and_mints_nothing(api, user, settings):
    settings.API_KEY_MAX_ACTIVE = 1
    body = {"username": user.username, "password": PASSWORD}
    assert api.post(TOKEN, body, format="json").status_code == 200

    response = api.post(TOKEN, body, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "too_many_api_keys"
    assert ApiKey.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_creations_never_pass_the_limit(settings):
    settings.API_KEY_MAX_ACTIVE = 3
    user = UserFactory()
    api_key_create(user_id=user.id, name="first", scopes=["read"])

    results = run_concurrently(
        *[lambda n=n: api_key_create(user_id=user.id, name=f"k{n}", scopes=["read"]) for n in range(6)]
    )

    refused = [result for result in results if isinstance(result, TooManyApiKeys)]
    assert len(refused) == 4, results
    assert ApiKey.objects.filter(user=user).count() == 3
    assert AuditLogEntry.objects.filter(action="api_key.created").count() == 3
