"""The configured signing key (``LEDGER_SIGNING_KEY``) and the table of public keys that serves it."""

from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from ..models import SigningKey
from ..signing import key_id_for, private_key_load, public_key_hex


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
    """Every key that has signed, oldest first."""
    return list(SigningKey.objects.order_by("created_at", "key_id"))
