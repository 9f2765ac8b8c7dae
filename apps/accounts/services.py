"""Writes of the accounts app: trader sign-up and API keys."""

import hashlib
import hmac
import secrets
from collections.abc import Sequence

from django.conf import settings
from django.utils import timezone

from apps.ledger.errors import DomainError, NotFound
from apps.wallets.addresses import address_validate
from apps.wallets.errors import InvalidAddress

from .models import ApiKey, Scope
from .notifications import email_user_on_commit

KEY_PREFIX = "ex"


def _digest(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


def api_key_create(
    *, user_id: int, name: str, scopes: Sequence[str], withdrawal_addresses: Sequence[str] = ()
) -> tuple[ApiKey, str]:
    """Create an API key; return it and the raw key ``ex_<prefix>_<secret>``, which is never stored or shown again.

    ``scopes`` is a non-empty subset of ``read``, ``trade``, ``withdraw``. ``withdrawal_addresses``
    (optional) restricts withdrawals made with this key to those addresses. The user is told by
    e-mail once it commits.
    Raises :class:`DomainError` naming ``name`` or ``scopes`` when they are invalid.
    """
    name = name.strip()
    if not name or len(name) > 100:
        raise DomainError("A name of 1 to 100 characters is required.", fields={"name": "1 to 100 characters."})
    unknown = set(scopes) - set(Scope.values)
    if not scopes or unknown:
        raise DomainError(
            "Choose at least one of read, trade, withdraw.", fields={"scopes": "Unknown or empty scopes."}
        )
    withdrawal_addresses = _checked_addresses(withdrawal_addresses)
    prefix = secrets.token_hex(4)
    raw_key = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        user_id=user_id,
        name=name,
        prefix=prefix,
        secret_hash=_digest(raw_key),
        scopes=sorted(set(scopes)),
        withdrawal_addresses=withdrawal_addresses,
    )
    email_user_on_commit(
        user_id=user_id, template="api_key_created", context={"key": key, "scopes": ", ".join(key.scopes)}
    )
    return key, raw_key


MAX_ALLOWED_ADDRESSES = 20


def _checked_addresses(addresses: Sequence[str]) -> list[str]:
    """The allow-list, each address valid on at least one network we can validate (at most 20)."""
    if len(addresses) > MAX_ALLOWED_ADDRESSES:
        message = f"At most {MAX_ALLOWED_ADDRESSES} withdrawal addresses."
        raise DomainError(message, fields={"withdrawal_addresses": message})
    for address in addresses:
        if not any(_valid_on(network, address) for network in settings.WALLETS_ADDRESS_VALIDATORS):
            message = f"{address[:64]!r} is not a valid withdrawal address."
            raise DomainError(message, fields={"withdrawal_addresses": message})
    return sorted(set(addresses))


def _valid_on(network: str, address: str) -> bool:
    try:
        address_validate(network=network, address=address)
    except InvalidAddress:
        return False
    return True


def api_key_revoke(*, user_id: int, key_id: int) -> ApiKey:
    """Revoke one of the user's keys (idempotent). Raises :class:`NotFound` for another user's key."""
    key = ApiKey.objects.filter(user_id=user_id, id=key_id).first()
    if key is None:
        raise NotFound("No such API key.")
    if key.revoked_at is None:
        ApiKey.objects.filter(id=key.id, revoked_at__isnull=True).update(revoked_at=timezone.now())
        key.refresh_from_db()
    return key


def api_key_authenticate(raw_key: str) -> ApiKey | None:
    """The active key matching ``raw_key`` (compared by hash in constant time), or None; records its last use."""
    parts = raw_key.split("_")
    if len(parts) < 3 or parts[0] != KEY_PREFIX:
        return None
    key = ApiKey.objects.select_related("user").filter(prefix=parts[1], revoked_at__isnull=True).first()
    if key is None or not hmac.compare_digest(key.secret_hash, _digest(raw_key)) or not key.user.is_active:
        return None
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.filter(id=key.id).update(last_used_at=now)  # at most once a minute per key
    return key
