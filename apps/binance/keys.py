"""Where the ``/api/v3/`` surface meets our API keys (apps.accounts): the key of a request and its signing secret.

Any refusal is Binance's -2015 "Invalid API-key, IP, or permissions for action." (401): an unknown,
revoked or expired key, a client address outside the key's IP allow-list, a key without a signing
secret (made before keys had one) or one whose secret cannot be opened.
"""

from apps.accounts.models import ApiKey
from apps.accounts.services import api_key_authenticate, api_key_signing_secret
from apps.core.errors import DomainError

from .errors import rejected_key


def key_authenticate(raw_key: str, *, client_ip: str) -> ApiKey:
    """The active key ``raw_key`` (the ``X-MBX-APIKEY`` header) used from ``client_ip``; raises -2015."""
    try:
        key = api_key_authenticate(raw_key, client_ip=client_ip)
    except DomainError:  # outside the key's IP allow-list
        raise rejected_key() from None
    if key is None:
        raise rejected_key()
    return key


def signing_secret(key: ApiKey) -> str:
    """The HMAC secret of ``key``, to check a signature with (never logged or returned); raises -2015."""
    try:
        return api_key_signing_secret(key=key)
    except DomainError:
        raise rejected_key() from None
