"""How many WebSocket connections one client address holds open on a streams process, and how many messages a
connection may send.

Break-it review: one address opened 900 connections, each subscribed to three streams, and the one uvicorn
process serving everyone grew by half and neared its file limit. :class:`ConnectionsPerAddress` wraps the
WebSocket routes (``exchange.asgi``) and refuses a connection beyond ``settings.STREAMS_CONNECTIONS_PER_ADDRESS``
from the same address before its handshake completes (HTTP 403); it counts this process's connections only, so
a client may hold that many on each process behind a load balancer.
"""

import time
from collections import Counter

from django.conf import settings

from exchange.client_ip import scope_client_ip

CLOSE_POLICY_VIOLATION = 1008  # RFC 6455, 7.4.1; sent before the handshake, the server answers 403


class ConnectionsPerAddress:
    """ASGI middleware over WebSocket routes: at most ``STREAMS_CONNECTIONS_PER_ADDRESS`` open at a time per client
    address (:func:`exchange.client_ip.scope_client_ip`), refused beyond it; other scopes pass through."""

    def __init__(self, app):
        self.app = app
        self.open: Counter[str] = Counter()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        address = scope_client_ip(scope)
        if self.open[address] >= settings.STREAMS_CONNECTIONS_PER_ADDRESS:
            await receive()  # the client's websocket.connect
            await send({"type": "websocket.close", "code": CLOSE_POLICY_VIOLATION})
            return None
        self.open[address] += 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.open[address] -= 1
            if not self.open[address]:
                del self.open[address]


class MessageBudget:
    """A connection's allowance of incoming messages: ``settings.STREAMS_MESSAGES_PER_SECOND`` a second (Binance's
    "WebSocket Limits": 5), with bursts of twice that. Break-it review: 200 frames in a burst were each answered, and
    each ``SUBSCRIBE`` reads the database: a connection past its budget is closed (as Binance disconnects it)."""

    def __init__(self):
        self.rate = settings.STREAMS_MESSAGES_PER_SECOND
        self.capacity = 2 * self.rate
        self.tokens = float(self.capacity)
        self.refilled = time.monotonic()

    def spend(self) -> bool:
        """Take one message from the allowance; false when none is left (the caller closes the connection)."""
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.refilled) * self.rate)
        self.refilled = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True
