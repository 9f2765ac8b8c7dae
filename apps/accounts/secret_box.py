"""Encryption at rest of API keys' signing secrets (AES-256-GCM, ``cryptography``).

The key is derived with HKDF-SHA256 from the setting ``API_SECRET_ENCRYPTION_KEY``, a secret of
its own rather than ``SECRET_KEY``: rotating Django's secret key (which signs sessions and
password-reset links) must not make every API signing secret unreadable, and a leaked
``SECRET_KEY`` must not also expose them. Production refuses to start without it.

Each secret is sealed with a fresh 96-bit nonce and the API key's ``prefix`` as associated
data, so a ciphertext copied onto another key's row does not open. Stored text:
``v1:<base64url(nonce + ciphertext + tag)>``.
"""

import base64
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

VERSION = "v1"
NONCE_BYTES = 12


class SecretUnreadable(Exception):
    """A stored secret that does not open with the configured key (another key, or tampered with)."""


def _cipher() -> AESGCM:
    material = settings.API_SECRET_ENCRYPTION_KEY.encode()
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"exchange api key signing secrets v1").derive(
        material
    )
    return AESGCM(key)


def secret_seal(secret: str, *, context: str) -> str:
    """``secret`` encrypted for storage, bound to ``context`` (the key's prefix)."""
    nonce = os.urandom(NONCE_BYTES)
    sealed = _cipher().encrypt(nonce, secret.encode(), context.encode())
    return f"{VERSION}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"


def secret_open(stored: str, *, context: str) -> str:
    """The secret :func:`secret_seal` stored for ``context``. Raises :class:`SecretUnreadable`."""
    version, _, payload = stored.partition(":")
    if version != VERSION:
        raise SecretUnreadable("Unknown secret format.")
    try:
        raw = base64.urlsafe_b64decode(payload.encode())
        return _cipher().decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], context.encode()).decode()
    except (ValueError, InvalidTag):
        raise SecretUnreadable("The secret does not open with API_SECRET_ENCRYPTION_KEY.") from None
