"""Reads of the streams app: whose user stream a key opens, market symbols in stream names."""

import hashlib
from datetime import datetime

from django.utils import timezone

from apps.orders.models import Market

from .models import StreamToken


def stream_token_user_id(*, key: str) -> int | None:
    """The id of the user whose stream ``key`` opens, or ``None`` (unknown or expired key)."""
    if not isinstance(key, str) or len(key) != 64:
        return None
    key_hash = hashlib.sha256(key.encode()).hexdigest()
    return (
        StreamToken.objects.filter(key_hash=key_hash, expires_at__gt=timezone.now())
        .values_list("user_id", flat=True)
        .first()
    )


def stream_token_expiry(*, key: str) -> datetime | None:
    """When the stream key ``key`` expires, or ``None`` when it is unknown (revoked) or already expired."""
    key_hash = hashlib.sha256(key.encode()).hexdigest()
    return (
        StreamToken.objects.filter(key_hash=key_hash, expires_at__gt=timezone.now())
        .values_list("expires_at", flat=True)
        .first()
    )


def stream_symbols() -> dict[str, str]:
    """Every market's stream symbol (``btcusdt``: Binance's, no dash, lower case) -> its symbol (``BTC-USDT``)."""
    return {stream_symbol(symbol): symbol for symbol in Market.objects.values_list("symbol", flat=True)}


def stream_symbol(symbol: str) -> str:
    """``BTC-USDT`` -> ``btcusdt``."""
    return symbol.replace("-", "").lower()
