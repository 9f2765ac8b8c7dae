"""The simulated network's address format, strict and checksummed.

A ``simnet`` address is ``sim1`` followed by 32 lower-case hex digits of payload and 8 of
checksum: the first 8 hex digits of ``sha256("simnet:" + payload)``. Anything else (upper
case, wrong length, a typo that breaks the checksum) is not an address.
"""

import hashlib
import re
import secrets

from apps.core.errors import InvalidAddress

PREFIX = "sim1"
_FORMAT = re.compile(r"sim1([0-9a-f]{32})([0-9a-f]{8})")


def _checksum(payload: str) -> str:
    return hashlib.sha256(f"simnet:{payload}".encode()).hexdigest()[:8]


def new_address() -> str:
    """A fresh random simnet address."""
    payload = secrets.token_hex(16)
    return f"{PREFIX}{payload}{_checksum(payload)}"


def is_valid(address: str) -> bool:
    """Whether ``address`` is a well-formed simnet address with a correct checksum."""
    match = _FORMAT.fullmatch(address) if isinstance(address, str) else None
    return match is not None and _checksum(match.group(1)) == match.group(2)


def validate_address(address: str) -> None:
    """Raise :class:`InvalidAddress` unless ``address`` is a valid simnet address."""
    if not is_valid(address):
        raise InvalidAddress("Not a valid simnet address (sim1 followed by 40 lower-case hex digits, checksummed).")
