"""Reads of the streams app: whose user stream a key opens, market symbols in stream names."""

import hashlib
from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.orders.models import Market

from .models import StreamToken


def stream_tokens_live() -> QuerySet[StreamToken]:
    """The stream keys that open a stream now: not expired, and made in a browser session or with an API key
    that is neither revoked nor expired (a key's stream keys die with it)."""
    now = timezone.now()
    key_alive = Q(api_key__revoked_at__isnull=True) & (
        Q(api_key__expires_at__isnull=True) | Q(api_key__expires_at__gt=now)
    )
    return StreamToken.objects.filter(Q(api_key__isnull=True) | key_alive, expires_at__gt=now)


def stream_token_user_id(*, key: str) -> int | None:
    """The id of the user whose stream ``key`` opens, or ``None`` (unknown or expired key, or its API key
    revoked or expired)."""
    if not isinstance(key, str) or len(key) != 64:
        return None
    key_hash = hashlib.sha256(key.encode()).hexdigest()
    return stream_tokens_live().filter(key_hash=key_hash).values_list("user_id", flat=True).first()


def stream_token_expiry(*, key: str) -> datetime | None:
    """When the stream key ``key`` stops opening its stream (its own expiry, or its API key's when sooner), or
    ``None`` when it opens nothing now (unknown, revoked, expired, or its API key revoked or expired)."""
    key_hash = hashlib.sha256(key.encode()).hexdigest()
    found = stream_tokens_live().filter(key_hash=key_hash).values_list("expires_at", "api_key__expires_at").first()
    if found is None:
        return None
    return min(at for at in found if at is not None)


def stream_symbols() -> dict[str, str]:
    """Every market's stream symbol (``btcusdt``: Binance's, no dash, lower case) -> its symbol (``BTC-USDT``)."""
    return {stream_symbol(symbol): symbol for symbol in Market.objects.values_list("symbol", flat=True)}


def stream_symbol(symbol: str) -> str:
    """``BTC-USDT`` -> ``btcusdt``."""
    return symbol.replace("-", "").lower()
