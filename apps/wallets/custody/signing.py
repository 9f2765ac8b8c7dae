"""The custody webhook's signature (API.md "Custody webhook").

``X-Custody-Timestamp`` holds unix seconds; ``X-Custody-Signature`` holds the hex
HMAC-SHA256 of ``"<timestamp>.<raw body>"`` keyed with the shared secret.
"""

import hashlib
import hmac
import time
from collections.abc import Mapping

from .base import CallbackUnauthenticated

TIMESTAMP_HEADER = "X-Custody-Timestamp"
SIGNATURE_HEADER = "X-Custody-Signature"


def signature(*, secret: str, timestamp: str, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``"<timestamp>.<body>"`` with ``secret``."""
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def signed_headers(*, secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The two headers that sign ``body`` at ``timestamp`` (default: now), as a provider sends them."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    return {
        TIMESTAMP_HEADER: stamp,
        SIGNATURE_HEADER: signature(secret=secret, timestamp=stamp, body=body),
        "Content-Type": "application/json",
    }


def verify(*, secret: str, headers: Mapping[str, str], body: bytes, max_skew: int, now: float | None = None) -> None:
    """Check the signature (in constant time) and that the timestamp is within ``max_skew`` seconds of ``now``.

    ``headers`` is looked up by the header names above (a case-insensitive mapping such as
    Django's ``request.headers``). Raises :class:`CallbackUnauthenticated`.
    """
    stamp = headers.get(TIMESTAMP_HEADER) or ""
    given = headers.get(SIGNATURE_HEADER) or ""
    if not stamp.isascii() or not stamp.isdigit() or len(stamp) > 12:
        raise CallbackUnauthenticated("Missing or malformed timestamp.")
    expected = signature(secret=secret, timestamp=stamp, body=body)
    if not hmac.compare_digest(expected.encode(), given.strip().lower().encode()):
        raise CallbackUnauthenticated("Bad signature.")
    current = time.time() if now is None else now
    if abs(current - int(stamp)) > max_skew:
        raise CallbackUnauthenticated("Stale timestamp.")
