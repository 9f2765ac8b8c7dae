"""Writes of the accounts app: API keys (scoped, expiring, IP-restricted, stored hashed) and their secrets.

Creating and revoking a key is recorded in the audit log (``api_key.created``, ``api_key.revoked``) in the transaction
that does it, never with the key or its secret; an account has at most ``API_KEY_MAX_ACTIVE`` active keys.
"""

import hashlib
import hmac
import ipaddress
import re
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from apps.audit.services import audit_record
from apps.core.addresses import address_validate
from apps.core.errors import DomainError, InvalidAddress, NotFound, PermissionDenied
from apps.core.reasons import hidden_characters_refuse

from .errors import PasswordChanged, TooManyApiKeys
from .events import api_key_created
from .models import ApiKey, Scope
from .notifications import email_user_on_commit
from .second_factor import second_factor_check_if_enrolled, second_factor_require
from .secret_box import SecretUnreadable, secret_open, secret_seal

KEY_PREFIX = "ex"


def _digest(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


class NewApiKey(NamedTuple):
    """What :func:`api_key_create` returns: the stored key, and the two values shown to the user once."""

    key: ApiKey
    raw_key: str  # ex_<prefix>_<secret>: Authorization: Token <raw_key> (X-MBX-APIKEY on /api/v3/)
    secret: str  # the HMAC-SHA256 secret that signs /api/v3/ requests (64 hex digits)


def api_key_create(
    *,
    user_id: int,
    name: str,
    scopes: Sequence[str],
    withdrawal_addresses: Sequence[str] = (),
    allowed_ips: Sequence[str] = (),
    expires_in: int | None = None,
    otp: str | None = None,
    password_hash: str | None = None,
) -> NewApiKey:
    """Create an API key; return it with its raw key and signing secret, which are never shown again.

    ``scopes`` is a non-empty subset of ``read``, ``trade``, ``withdraw``. ``withdrawal_addresses``
    (optional) restricts withdrawals made with this key to those addresses; ``allowed_ips``
    (optional, IP addresses or networks, at most 20) the client addresses it is accepted from;
    ``expires_in`` (optional, whole seconds from now, 60 to ``API_KEY_MAX_LIFETIME``) its life.
    The ``withdraw`` scope needs the user's second factor: ``otp``, a valid code now (issue 14); any other
    scope needs one too once the user has a second factor (API.md ``otp``), for every caller (API and web).
    The raw key is stored as its SHA-256 only; the signing secret encrypted (``secret_box``).

    Raises :class:`DomainError` naming ``name``, ``scopes``, ``withdrawal_addresses``, ``allowed_ips``
    or ``expires_in`` when invalid; :class:`TooManyApiKeys` when the user has ``API_KEY_MAX_ACTIVE``
    active keys already (counted before the code is checked, so none is spent on a refused key, and again
    under a lock of the user's row, so concurrent creations never pass the limit); then, for ``withdraw``,
    :class:`SecondFactorRequired` when the user has no second factor; :class:`InvalidOtp` for a missing or
    wrong code whenever the user has one (codes are checked before the transaction, so a wrong one counts
    against django-otp's throttle). Nothing is written when it raises. The key is audited
    (``api_key.created``, actor the user, ``after`` its name, prefix, scopes, allow-lists and expiry) in its
    transaction; the user is told by e-mail once it commits.

    ``password_hash`` is the user's stored password (``user.password``) as the caller read it when it authenticated
    them: the key is refused (:class:`PasswordChanged`, 401) when the password changed since. A password reset
    revokes every key in its transaction; a request that proved the old password just before it must not add one
    after it (break-it review: 19 keys made while a reset committed outlived it).
    """
    name = name.strip() if isinstance(name, str) else ""
    hidden_characters_refuse(name, field="name")  # its own message (break-it review: "\u202e" was "1 to 100")
    if not name or len(name) > 100 or not name.isprintable():
        raise DomainError("A name of 1 to 100 characters is required.", fields={"name": "1 to 100 characters."})
    unknown = set(scopes) - set(Scope.values)
    if not scopes or unknown:
        raise DomainError(
            "Choose at least one of read, trade, withdraw.", fields={"scopes": "Unknown or empty scopes."}
        )
    withdrawal_addresses = _checked_addresses(withdrawal_addresses)
    networks = _checked_networks(allowed_ips)
    expires_at = _expiry(expires_in)
    _refuse_past_the_limit(user_id)
    if Scope.WITHDRAW in scopes:
        second_factor_require(user_id=user_id, code=otp)
    else:
        second_factor_check_if_enrolled(user_id=user_id, code=otp)
    # 64 bits: the prefix is unique among every key ever made (revoked ones are kept); at 32 bits a collision, a
    # refused INSERT, was a matter of time (break-it review).
    prefix = secrets.token_hex(8)
    raw_key = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    signing_secret = secrets.token_hex(32)
    with transaction.atomic():
        # The user's row, locked: concurrent creations for one user count their keys one after the other, and one
        # waits for a password change or reset under way (it updates this row) and then reads its new password.
        users = get_user_model().objects.select_for_update(of=("self",), no_key=True).filter(pk=user_id)
        current_hash = users.values_list("password", flat=True).first()
        if password_hash is not None and current_hash != password_hash:
            raise PasswordChanged()
        _refuse_past_the_limit(user_id)
        key = ApiKey.objects.create(
            user_id=user_id,
            name=name,
            prefix=prefix,
            secret_hash=_digest(raw_key),
            scopes=sorted(set(scopes)),
            withdrawal_addresses=withdrawal_addresses,
            allowed_ips=networks,
            expires_at=expires_at,
            signing_secret_sealed=secret_seal(signing_secret, context=prefix),
        )
        audit_record(
            actor_id=user_id,
            action="api_key.created",
            object_type=AUDIT_OBJECT_TYPE,
            object_id=key.id,
            before={},
            after=_audited(key),
        )
        api_key_created.send(sender=ApiKey, user_id=user_id, name=key.name, scopes=list(key.scopes))
        email_user_on_commit(
            user_id=user_id, template="api_key_created", context={"key": key, "scopes": ", ".join(key.scopes)}
        )
    return NewApiKey(key, raw_key, signing_secret)


AUDIT_OBJECT_TYPE = "accounts.apikey"


def _audited(key: ApiKey) -> dict:
    """What the audit log keeps of a new key: never the key, its hash or its signing secret."""
    return {
        "name": key.name,
        "prefix": key.prefix,
        "scopes": list(key.scopes),
        "allowed_ips": list(key.allowed_ips),
        "withdrawal_addresses": list(key.withdrawal_addresses),
        "expires_at": _iso(key.expires_at),
    }


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _refuse_past_the_limit(user_id: int) -> None:
    """Raise :class:`TooManyApiKeys` when the user has ``API_KEY_MAX_ACTIVE`` keys neither revoked nor expired."""
    limit = settings.API_KEY_MAX_ACTIVE
    if ApiKey.objects.filter(user_id=user_id).active().count() >= limit:
        raise TooManyApiKeys(limit)


MAX_ALLOWED_IPS = 20


def _checked_networks(values: Sequence[str]) -> list[str]:
    """The IP allow-list as networks in canonical form (a bare address is a /32 or /128), at most 20."""
    if len(values) > MAX_ALLOWED_IPS:
        message = f"At most {MAX_ALLOWED_IPS} IP addresses or networks."
        raise DomainError(message, fields={"allowed_ips": message})
    networks = set()
    for value in values:
        try:
            if isinstance(value, str) and "%" in value:  # an IPv6 zone (fe80::1%eth0) names a host's interface
                raise ValueError(value)
            networks.add(str(ipaddress.ip_network(value.strip() if isinstance(value, str) else value)))
        except (TypeError, ValueError):
            message = f"{str(value)[:64]!r} is not an IP address or network (203.0.113.7, 2001:db8::/48)."
            raise DomainError(message, fields={"allowed_ips": message}) from None
    return sorted(networks)


def _expiry(expires_in: int | None) -> datetime | None:
    if expires_in is None:
        return None
    longest = settings.API_KEY_MAX_LIFETIME
    if isinstance(expires_in, bool) or not isinstance(expires_in, int) or not 60 <= expires_in <= longest:
        message = f"Whole seconds from 60 to {longest}."
        raise DomainError(f"expires_in: {message}", fields={"expires_in": message})
    return timezone.now() + timedelta(seconds=expires_in)


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
    """Revoke one of the user's keys (idempotent: revoking a revoked key changes and records nothing).

    Audited as ``api_key.revoked`` (actor the user, ``revoked_at`` before and after, ISO 8601) in the transaction
    that sets ``revoked_at``. Raises :class:`NotFound` for another user's key (nothing written).
    """
    with transaction.atomic():
        key = _locked_key(key_id, user_id=user_id)
        _revoke(key, actor_id=user_id)
    return key


REVOKE_PERMISSION = "accounts.revoke_apikey"


def api_key_revoke_by_operator(*, key_id: int, operator_id: int) -> bool:
    """An operator revokes a customer's key; True when this revoked it, False when it was revoked already.

    Audited as :func:`api_key_revoke` is, the operator the actor, and the key's user is e-mailed
    (``emails/api_key_revoked.txt``) once it commits. Raises :class:`PermissionDenied` when the operator is not
    active staff with ``accounts.revoke_apikey``, :class:`NotFound` for an unknown key (nothing written).
    """
    operator = get_user_model().objects.filter(pk=operator_id, is_active=True, is_staff=True).first()
    if operator is None or not operator.has_perm(REVOKE_PERMISSION):
        raise PermissionDenied(f"Revoking API keys needs the {REVOKE_PERMISSION} permission.")
    with transaction.atomic():
        key = _locked_key(key_id)
        if not _revoke(key, actor_id=operator_id):
            return False
        email_user_on_commit(user_id=key.user_id, template="api_key_revoked", context={"key": key})
    return True


def _locked_key(key_id: int, *, user_id: int | None = None) -> ApiKey:
    """The key ``key_id`` (of ``user_id`` when given), its row locked until the transaction ends; else NotFound."""
    keys = ApiKey.objects.select_for_update(of=("self",), no_key=True).filter(id=key_id)
    key = (keys if user_id is None else keys.filter(user_id=user_id)).first()
    if key is None:
        raise NotFound("No such API key.")
    return key


def _revoke(key: ApiKey, *, actor_id: int, reason: str = "") -> bool:
    """Set ``revoked_at`` on a locked, unrevoked key and audit it (with ``reason`` when given); False (nothing
    written) when revoked already."""
    if key.revoked_at is not None:
        return False
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    audit_record(
        actor_id=actor_id,
        action="api_key.revoked",
        object_type=AUDIT_OBJECT_TYPE,
        object_id=key.id,
        before={"revoked_at": None},
        after={"revoked_at": _iso(key.revoked_at), **({"reason": reason} if reason else {})},
    )
    return True


def api_keys_revoke_all(*, user_id: int) -> list[int]:
    """Revoke every key of the user not revoked yet, in the caller's transaction, each audited as
    :func:`api_key_revoke` is with the reason ``password_reset``; return the ids revoked. A password reset calls it:
    whoever knew the old password may have made keys with it. Raises nothing of its own."""
    keys = ApiKey.objects.select_for_update(of=("self",), no_key=True).filter(user_id=user_id, revoked_at__isnull=True)
    return [key.id for key in keys.order_by("id") if _revoke(key, actor_id=user_id, reason="password_reset")]


_PREFIX = re.compile(r"[0-9a-f]{8,16}")
"""A key's prefix as made: 16 hex digits (8 before they had 64 bits)."""


def api_key_authenticate(raw_key: str, *, client_ip: str) -> ApiKey | None:
    """The active key matching ``raw_key`` (compared by hash in constant time), or None; records its last use.

    None for an unknown, revoked or expired key, or one whose user is inactive. ``client_ip`` is the
    request's client (:func:`exchange.client_ip.client_ip`): a key with an IP allow-list raises
    :class:`PermissionDenied` (403) for any other address, and is not marked used.
    """
    parts = raw_key.split("_")
    if len(parts) < 3 or parts[0] != KEY_PREFIX or not _PREFIX.fullmatch(parts[1]):
        return None  # a malformed prefix (a NUL, say, which PostgreSQL refuses to compare: a 500) names no key
    key = ApiKey.objects.select_related("user").filter(prefix=parts[1], revoked_at__isnull=True).first()
    if key is None or not hmac.compare_digest(key.secret_hash, _digest(raw_key)) or not key.user.is_active:
        return None
    if key.is_expired:
        return None
    if key.allowed_ips and not _ip_allowed(client_ip, key.allowed_ips):
        raise PermissionDenied(f"This API key does not accept requests from {client_ip}.")
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.filter(id=key.id).update(last_used_at=now)  # at most once a minute per key
    return key


def _ip_allowed(client_ip: str, networks: Sequence[str]) -> bool:
    try:
        address = ipaddress.ip_address(client_ip)
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(network) for network in networks)


def api_key_signing_secret(*, key: ApiKey) -> str:
    """The HMAC secret of ``key`` (an authenticated, active key), decrypted, for checking a request's signature.

    Never log or return it. Raises :class:`NotFound` for a key that has none (made before signing
    secrets existed) and :class:`DomainError` when it does not open with ``API_SECRET_ENCRYPTION_KEY``.
    """
    if not key.signing_secret_sealed:
        raise NotFound("This API key has no signing secret: create a new key.")
    try:
        return secret_open(key.signing_secret_sealed, context=key.prefix)
    except SecretUnreadable:
        raise DomainError("This API key's signing secret cannot be read: create a new key.") from None
