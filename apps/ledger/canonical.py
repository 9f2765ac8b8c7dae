"""Canonical JSON and times of the proofs' wire formats (PROOFS.md "Common rules"); no Django.

``canon(x)`` is what every hash of PROOFS.md is taken over: keys sorted, no insignificant
whitespace, UTF-8 with ``ensure_ascii=False``. Times are ISO 8601 UTC with microseconds
and a ``Z``.
"""

import hashlib
import json
from datetime import UTC, datetime


def canon(value: object) -> bytes:
    """``value`` as canonical JSON bytes (sorted keys, ``separators=(",", ":")``, UTF-8)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def canon_hash(value: object) -> bytes:
    """``SHA256(canon(value))``: 32 bytes."""
    return hashlib.sha256(canon(value)).digest()


def proof_time(value: datetime) -> str:
    """An aware datetime as ``2026-12-01T07:01:56.123456Z`` (always six digits of microseconds)."""
    if value.tzinfo is None:
        raise ValueError("proof times must be timezone-aware")
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
