"""Ed25519 keys and signatures of the proofs (PROOFS.md "Common rules"); no Django.

A private key is given as 64 hex characters (the 32-byte RFC 8032 seed) or as a PKCS#8
PEM block. Signatures are over the 32 raw bytes of a hash and shown as 128 hex
characters; public keys as 64 hex characters. A key's ``key_id`` is the first 16 hex
characters of ``SHA256(public key bytes)``.
"""

import hashlib
import re

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

_HEX_SEED = re.compile(r"[0-9a-fA-F]{64}")


class SigningKeyError(ValueError):
    """The configured signing key is not an Ed25519 private key in hex or PEM."""


def private_key_load(text: str) -> Ed25519PrivateKey:
    """Parse ``LEDGER_SIGNING_KEY``: 64 hex characters or a PEM Ed25519 private key.

    Raises :class:`SigningKeyError` for anything else.
    """
    text = text.strip()
    if _HEX_SEED.fullmatch(text):
        return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(text))
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(text.encode(), password=None)
        except (ValueError, TypeError) as exc:
            raise SigningKeyError(f"not a readable unencrypted PEM private key: {exc}") from None
        if isinstance(key, Ed25519PrivateKey):
            return key
        raise SigningKeyError("the PEM key is not an Ed25519 key")
    raise SigningKeyError("expected 64 hex characters (an Ed25519 seed) or a PEM Ed25519 private key")


def public_key_load(text: str) -> str:
    """A listed public key (``LEDGER_TRUSTED_PUBLIC_KEYS``) as 64 lower-case hex characters (32 bytes). Raises
    :class:`SigningKeyError` for anything else."""
    key = text.strip().lower()
    if not _HEX_SEED.fullmatch(key):
        raise SigningKeyError(f"{text!r} is not an Ed25519 public key (64 hex characters)")
    return key


def private_key_generate_hex() -> str:
    """A new random Ed25519 private key as 64 hex characters."""
    key = Ed25519PrivateKey.generate()
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    return raw.hex()


def public_key_hex(key: Ed25519PrivateKey) -> str:
    """The 32-byte public key of ``key`` in hex."""
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def key_id_for(public_key: str) -> str:
    """The ``key_id`` of a hex public key: the first 16 hex characters of its SHA-256."""
    return hashlib.sha256(bytes.fromhex(public_key)).hexdigest()[:16]


def sign(key: Ed25519PrivateKey, digest: bytes) -> str:
    """Ed25519 signature (128 hex characters) over the 32 raw bytes of ``digest``."""
    return key.sign(digest).hex()


def signature_valid(public_key: str, digest: bytes, signature: str) -> bool:
    """Whether ``signature`` (hex) is the Ed25519 signature of ``digest`` by ``public_key`` (hex)."""
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key)).verify(bytes.fromhex(signature), digest)
    except (InvalidSignature, ValueError):
        return False
    return True
