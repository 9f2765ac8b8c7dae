"""Where the ``/api/v3/`` surface meets our API keys: the client's IP, the key's own rules, its signing secret."""

from django.http import HttpRequest

from apps.accounts.models import ApiKey


def client_ip(request: HttpRequest) -> str:
    """The client's address (the socket's peer)."""
    return request.META.get("REMOTE_ADDR", "")


def key_usable_from(key: ApiKey, ip: str) -> bool:
    """Whether ``key`` may be used from ``ip``."""
    return True


def signing_secret(key: ApiKey) -> str:
    """The HMAC secret of ``key``. PROVISIONAL until the holes branch's api_key_signing_secret is merged."""
    import hashlib
    import hmac

    from django.conf import settings

    return hmac.new(settings.SECRET_KEY.encode(), f"binance:{key.prefix}".encode(), hashlib.sha256).hexdigest()
