"""The configured signing key (``LEDGER_SIGNING_KEY``), the public keys pinned by the settings, and the table of
public keys that serves them.

The key table is only a cache of what was published: whoever can write to the database can add a row to it.
What verifies is the pinned set (:func:`pinned_public_keys`), which comes from the settings alone.
"""

from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from ..models import SigningKey
from ..signing import SigningKeyError, key_id_for, private_key_load, public_key_hex, public_key_load


@dataclass(frozen=True)
class ActiveKey:
    """The private key that signs now, and its row in the key table."""

    private_key: Ed25519PrivateKey
    row: SigningKey


def signing_key_active() -> ActiveKey:
    """The key of ``settings.LEDGER_SIGNING_KEY``, its public half registered in the key table on first use.

    Run inside the signer's transaction. Raises ``ImproperlyConfigured`` when no key is set.
    After a rotation the old rows stay, so blocks signed by them still verify.
    """
    if not settings.LEDGER_SIGNING_KEY:
        raise ImproperlyConfigured("LEDGER_SIGNING_KEY is not set.")
    private_key = private_key_load(settings.LEDGER_SIGNING_KEY)
    public_key = public_key_hex(private_key)
    SigningKey.objects.bulk_create(
        [SigningKey(key_id=key_id_for(public_key), public_key=public_key, created_at=timezone.now())],
        ignore_conflicts=True,
    )
    return ActiveKey(private_key, SigningKey.objects.get(key_id=key_id_for(public_key)))


def public_keys() -> list[SigningKey]:
    """Every key that has signed and is pinned (:func:`pinned_public_keys`), oldest first: a key added to the
    table by someone with database rights is not published."""
    return list(
        SigningKey.objects.filter(public_key__in=list(pinned_public_keys().values())).order_by("created_at", "key_id")
    )


def pinned_public_keys() -> dict[str, str]:
    """``{key_id: public key hex}`` of every key the journal and the snapshots may be signed with, from the settings
    only (never the key table): the public half of ``LEDGER_SIGNING_KEY`` when one is set, and each key of
    ``LEDGER_TRUSTED_PUBLIC_KEYS`` (retired signing keys after a rotation, or the exchange's keys for a verifier
    that holds no private key).

    Raises ``ImproperlyConfigured`` for a signing key it cannot read or a listed public key that is not
    64 hex characters.
    """
    pinned: dict[str, str] = {}
    if settings.LEDGER_SIGNING_KEY:
        try:
            public_key = public_key_hex(private_key_load(settings.LEDGER_SIGNING_KEY))
        except SigningKeyError as exc:
            raise ImproperlyConfigured(f"LEDGER_SIGNING_KEY is not usable: {exc}") from None
        pinned[key_id_for(public_key)] = public_key
    for listed in settings.LEDGER_TRUSTED_PUBLIC_KEYS:
        try:
            public_key = public_key_load(listed)
        except SigningKeyError as exc:
            raise ImproperlyConfigured(f"LEDGER_TRUSTED_PUBLIC_KEYS: {exc}.") from None
        pinned[key_id_for(public_key)] = public_key
    return pinned
