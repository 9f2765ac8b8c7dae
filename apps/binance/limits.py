"""Binance's rate limits with real counters in Redis (the default cache): request weight and orders.

Binance ("LIMITS"): each endpoint has a weight; the weight used per client IP in the current
minute is returned in ``X-MBX-USED-WEIGHT-1M`` and past ``REQUEST_WEIGHT`` the request is a
429 -1003 with ``Retry-After`` (seconds until the window ends). New orders are counted per
account in ``X-MBX-ORDER-COUNT-10S`` and ``X-MBX-ORDER-COUNT-1D``; past their limits a
placement is a 429 -1015. Windows are fixed, aligned on the epoch, as Binance's are. The
limits are settings (``BINANCE_REQUEST_WEIGHT_PER_MINUTE``, ``BINANCE_ORDERS_PER_10_SECONDS``,
``BINANCE_ORDERS_PER_DAY``) and ``exchangeInfo`` lists them. When the counters cannot be reached (Redis down
or stalled) a request is let through without the counters' headers, and a warning logged (as
:mod:`apps.api.throttles` does).
"""

import logging
from dataclasses import dataclass

import redis
from django.conf import settings
from django.core.cache import cache

from .errors import TOO_MANY_ORDERS, TOO_MANY_REQUESTS, BinanceError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Window:
    """One counter: ``seconds`` wide, ``limit`` per window; ``header`` reports it, ``interval``/``num`` as Binance names it."""

    kind: str
    seconds: int
    interval: str
    num: int
    header: str

    @property
    def limit(self) -> int:
        return {
            "weight": settings.BINANCE_REQUEST_WEIGHT_PER_MINUTE,
            "orders10s": settings.BINANCE_ORDERS_PER_10_SECONDS,
            "orders1d": settings.BINANCE_ORDERS_PER_DAY,
        }[self.kind]


WEIGHT_1M = Window("weight", 60, "MINUTE", 1, "X-MBX-USED-WEIGHT-1M")
ORDERS_10S = Window("orders10s", 10, "SECOND", 10, "X-MBX-ORDER-COUNT-10S")
ORDERS_1D = Window("orders1d", 86400, "DAY", 1, "X-MBX-ORDER-COUNT-1D")


def _count(window: Window, ident: str, amount: int, now: float) -> tuple[int, int] | None:
    """Add ``amount`` to ``ident``'s counter of the current window; ``(total, seconds left in the window)``, or
    ``None`` when Redis cannot be reached (logged)."""
    start = int(now) // window.seconds * window.seconds
    key = f"binance:{window.kind}:{ident}:{start}"
    try:
        cache.add(key, 0, timeout=window.seconds + 1)  # only when absent: the first request of the window
        total = cache.incr(key, amount)
    except redis.RedisError:
        log.warning("binance.rate_limit_unavailable", exc_info=True, extra={"window": window.kind})
        return None
    return total, max(1, start + window.seconds - int(now))


def weight_use(*, ip: str, weight: int, now: float) -> dict[str, str]:
    """Count ``weight`` for the client ``ip``; the header to answer with (none without Redis). Raises -1003 (429)
    past the limit."""
    counted = _count(WEIGHT_1M, ip, weight, now)
    if counted is None:
        return {}
    used, left = counted
    headers = {WEIGHT_1M.header: str(used)}
    if used > WEIGHT_1M.limit:
        raise BinanceError(
            TOO_MANY_REQUESTS,
            f"Too much request weight used; current limit is {WEIGHT_1M.limit} request weight per 1 MINUTE. "
            "Please use WebSocket Streams for live updates to avoid polling the API.",
            status=429,
            headers={**headers, "Retry-After": str(left)},
        )
    return headers


def orders_count(*, user_id: int, now: float) -> dict[str, str]:
    """Count one new order for the user; the two order-count headers (none without Redis). Raises -1015 (429)
    past a limit."""
    headers = {}
    for window in (ORDERS_10S, ORDERS_1D):
        counted = _count(window, f"user{user_id}", 1, now)
        if counted is None:
            continue
        used, left = counted
        headers[window.header] = str(used)
        if used > window.limit:
            raise BinanceError(
                TOO_MANY_ORDERS,
                f"Too many new orders; current limit is {window.limit} orders per {window.num} {window.interval}.",
                status=429,
                headers={**headers, "Retry-After": str(left)},
            )
    return headers


def rate_limits() -> list[dict]:
    """The limits as ``exchangeInfo``'s ``rateLimits`` lists them."""
    return [
        {"rateLimitType": "REQUEST_WEIGHT", "interval": "MINUTE", "intervalNum": 1, "limit": WEIGHT_1M.limit},
        {"rateLimitType": "ORDERS", "interval": "SECOND", "intervalNum": 10, "limit": ORDERS_10S.limit},
        {"rateLimitType": "ORDERS", "interval": "DAY", "intervalNum": 1, "limit": ORDERS_1D.limit},
    ]
