"""The WebSocket endpoint of the streams, Binance's paths: ``/ws/<stream>`` and ``/stream?streams=a/b``.

A raw connection (``/ws/btcusdt@depth``) receives each event as it is; a combined one
(``/stream?streams=btcusdt@depth/btcusdt@trade``) receives ``{"stream": name, "data": event}``.
Either may open with no stream (``/ws``, ``/stream``) and subscribe afterwards, as Binance's clients do
(break-it review: Hummingbot's connector opens ``/ws`` and sends ``SUBSCRIBE``).
A 64-character stream key (``POST /api/v1/stream-token/``) in place of a stream name opens
its user's private stream; only that user's events are ever sent on it. Binance's
``SUBSCRIBE``, ``UNSUBSCRIBE`` and ``LIST_SUBSCRIPTIONS`` messages change the streams of an
open connection. Cookies authenticate nothing here (so no other site can open a user's
stream with them): the browser asks for a stream key over the authenticated API.

Order and gaps: every ``depthUpdate`` continues the previous one (``U`` is the last ``u``
plus one). An event already seen (``u`` not above the last one: the relay published a
round twice) is dropped; a depth event that does not continue the last one (a message
lost while Redis reconnected) closes the connection with code 4409, and the client starts
again from a fresh snapshot, as Binance's book procedure says.

Keys: a user stream lives as long as its key. The connection checks its keys every
``STREAMS_TOKEN_CHECK_SECONDS`` and at each key's expiry; a key that is gone (revoked) or expired
gets Binance's ``{"e": "listenKeyExpired", "E": <ms>, "listenKey": <key>}`` and the connection is
closed with code 4401 (a new key opens a new stream).
"""

import asyncio
import contextlib
import json
import time
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import timezone

from .connections import CLOSE_POLICY_VIOLATION, MessageBudget
from .groups import user_group
from .names import MAX_STREAMS, InvalidStream, PublicStream, parse_stream
from .selectors import stream_symbols, stream_token_expiry, stream_token_user_id

CLOSE_INVALID = 4400  # a stream name or message that names nothing
CLOSE_EXPIRED = 4401  # the user stream's key expired or was revoked: create a new one
CLOSE_GAP = 4409  # an event was lost: resubscribe and take a fresh snapshot

# Binance's error codes of the market streams' answers ("WebSocket Streams", "Error Messages"): clients such as
# ccxt.pro read ``error.code`` as a number.
INVALID_REQUEST = 2  # a request or stream name that names nothing
INVALID_JSON = 3  # a message that is not JSON
TOO_MANY_MESSAGES = -1003  # Binance's "Too many requests" (its WebSocket API's code for the same)


def first_delivery(seen: dict, message: dict) -> bool:
    """Whether a relay ``message`` with update ids comes after what was sent of its sequence (``seen``: sequence ->
    the ``(update id, part)`` last sent); false for a repeat, which a relay round published again after a crash
    sends. A sequence's updates arrive in order, so anything at or before the last sent is a repeat."""
    last = seen.get(message.get("sequence"))
    return last is None or (message["last"], message.get("part", 0)) > last


REQUEST_ID_RULE = "id is an integer from 0 to 2^63-1, a string of at most 64 printable characters, or null."


def request_id_valid(request_id: object) -> bool:
    """Whether ``request_id`` (the ``id`` of a WebSocket request, echoed in its answer) is one this server echoes:
    ``None``, an ``int`` in ``0 .. 2**63 - 1`` (not a bool) or a printable ``str`` of 1 to 64 characters (Binance's
    market streams and WebSocket API take an integer or a string). A float is refused: ``1e400`` decodes to
    infinity, which JSON cannot carry back."""
    if request_id is None:
        return True
    if isinstance(request_id, str):
        return 1 <= len(request_id) <= 64 and request_id.isprintable()
    return type(request_id) is int and 0 <= request_id < 2**63


class StreamConsumer(AsyncWebsocketConsumer):
    """One client connection: its subscriptions (group -> stream name) and the last update id per group."""

    def init_state(self) -> None:
        """The connection's state before any subscription (also :class:`apps.binance.sockets.MarketSocket`'s)."""
        self.streams: dict[str, str] = {}  # group -> stream name
        self.last: dict[str, dict] = {}  # per group and sequence: the (update id, part) last sent
        self.depth_groups: set[str] = set()
        self.keys: dict[str, str] = {}  # user stream key -> its group
        self.key_watch: asyncio.Task | None = None
        self.budget = MessageBudget()

    async def connect(self):
        self.init_state()
        path = self.scope["path"].rstrip("/")
        self.combined = path == "/stream"
        if self.combined:
            names = parse_qs(self.scope["query_string"].decode("latin-1")).get("streams", [""])[0].split("/")
        elif path == "/ws" or path.startswith("/ws/"):
            names = [path.removeprefix("/ws").removeprefix("/")]
        else:
            await self.accept()
            await self._refuse("No such stream path: /ws/<stream> or /stream?streams=<stream>/<stream>.", "path")
            return
        names = [name for name in names if name]
        # Subscribed before the handshake completes: an event published after it reaches the client.
        error = await self._subscribe(names) if names else None
        await self.accept()
        if error:
            await self._refuse(error, "streams")

    async def disconnect(self, code):
        watch = getattr(self, "key_watch", None)
        if watch is not None and watch is not asyncio.current_task():
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        for group in getattr(self, "streams", {}):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None):
        """Binance's live subscription messages: ``{"method": "SUBSCRIBE", "params": [names], "id": n}``; past the
        connection's message budget (:class:`~apps.streams.connections.MessageBudget`) an error and the close."""
        if not self.budget.spend():
            message = f"More than {self.budget.rate} messages a second: connection closed."
            await self._error(None, message, "method", TOO_MANY_MESSAGES)
            await self.close(code=CLOSE_POLICY_VIOLATION)
            return
        try:
            request = json.loads(text_data or "")
        except (ValueError, RecursionError):  # RecursionError: JSON nested too deeply
            await self._error(
                None, 'Invalid JSON: send {"method": ..., "params": [...], "id": ...}.', "method", INVALID_JSON
            )
            return
        if not isinstance(request, dict) or "method" not in request:
            await self._error(None, 'Send {"method": ..., "params": [...], "id": ...}.', "method")
            return
        method, request_id, params = request["method"], request.get("id"), request.get("params", [])
        if not request_id_valid(request_id):
            await self._error(None, REQUEST_ID_RULE, "id")
            return
        if not isinstance(params, list) or not all(isinstance(name, str) for name in params):
            await self._error(request_id, "params is a list of stream names.", "params")  # the id answered, as ever
            return
        if method == "SUBSCRIBE":
            error = await self._subscribe(params)
            await (self._error(request_id, error, "params") if error else self._result(request_id, None))
        elif method == "UNSUBSCRIBE":
            for group in [group for group, name in self.streams.items() if name in params]:
                await self.channel_layer.group_discard(group, self.channel_name)
                del self.streams[group]
                self.last.pop(group, None)
                self.keys = {key: kept for key, kept in self.keys.items() if kept != group}
            await self._result(request_id, None)
        elif method == "LIST_SUBSCRIPTIONS":
            await self._result(request_id, list(self.streams.values()))
        else:
            await self._error(request_id, "method is SUBSCRIBE, UNSUBSCRIBE or LIST_SUBSCRIPTIONS.", "method")

    async def dispatch(self, message):
        """Relay events go straight to :meth:`stream_event`.

        Channels runs ``close_old_connections`` in its one database thread before every message it
        dispatches; relay events touch no database, and at hundreds of connections that thread hop
        per event and connection is what limits the fan-out. Other messages take Channels' path.
        """
        if message["type"] == "stream.event":
            await self.stream_event(message)
        else:
            await super().dispatch(message)

    async def stream_event(self, message):
        """An event from the relay for one of this connection's groups (``message["group"]``)."""
        group = message["group"]
        name = self.streams.get(group)
        if name is None:
            return  # unsubscribed meanwhile
        if message["last"] is not None:
            seen = self.last.setdefault(group, {})
            if not first_delivery(seen, message):
                return  # published twice (a relay round that did not commit)
            previous = seen.get(None)  # a depth group's own sequence
            if previous is not None and group in self.depth_groups and message["first"] != previous[0] + 1:
                await self.close(code=CLOSE_GAP, reason="Missed book updates: take a fresh snapshot.")
                return
            seen[message.get("sequence")] = (message["last"], message.get("part", 0))
        data = message["data"]
        await self.send(text_data=f'{{"stream":{json.dumps(name)},"data":{data}}}' if self.combined else data)

    async def _subscribe(self, names: list[str]) -> str | None:
        """Join the groups of ``names``; the reason none was joined when one names nothing."""
        if not names:
            return "Name at least one stream."
        if len(self.streams) + len(names) > MAX_STREAMS:
            return f"At most {MAX_STREAMS} streams per connection."
        symbols = set(await database_sync_to_async(stream_symbols)())
        groups: dict[str, tuple[str, bool]] = {}
        keys: dict[str, str] = {}
        for name in names:
            try:
                stream = parse_stream(name, symbols)
            except InvalidStream as exc:
                return str(exc)
            if isinstance(stream, PublicStream):
                groups[stream.group] = (name, stream.stream == "depth")
            else:
                user_id = await database_sync_to_async(stream_token_user_id)(key=stream)
                if user_id is None:
                    return "Unknown or expired stream key."
                groups[user_group(user_id)] = (name, False)
                keys[stream] = user_group(user_id)
        for group, (name, depth) in groups.items():
            await self.channel_layer.group_add(group, self.channel_name)
            self.streams[group] = name
            if depth:
                self.depth_groups.add(group)
        self.keys.update(keys)
        if self.keys and self.key_watch is None:
            self.key_watch = asyncio.create_task(self._watch_keys())
        return None

    async def _watch_keys(self) -> None:
        """Until every key is unsubscribed: check the keys every ``STREAMS_TOKEN_CHECK_SECONDS`` and at the
        earliest expiry; on the first key gone or expired, ``listenKeyExpired`` and close (:data:`CLOSE_EXPIRED`)."""
        expiry: dict[str, float] = {}  # key -> its expiry (epoch seconds) as last read
        while self.keys:
            for key in list(self.keys):
                expires_at = await database_sync_to_async(stream_token_expiry)(key=key)
                if expires_at is None:
                    await self._key_expired(key)
                    return
                expiry[key] = expires_at.timestamp()
            now = timezone.now().timestamp()
            soonest = min(expiry.get(key, now) for key in self.keys)  # a key subscribed meanwhile: check it now
            await asyncio.sleep(max(0.0, min(settings.STREAMS_TOKEN_CHECK_SECONDS, soonest - now)))
        self.key_watch = None

    async def _key_expired(self, key: str) -> None:
        event = json.dumps({"e": "listenKeyExpired", "E": time.time_ns() // 1_000_000, "listenKey": key})
        await self.send(text_data=f'{{"stream":{json.dumps(key)},"data":{event}}}' if self.combined else event)
        await self.close(code=CLOSE_EXPIRED, reason="The stream key expired or was revoked.")

    async def _refuse(self, message: str, field: str) -> None:
        await self._error(None, message, field)
        await self.close(code=CLOSE_INVALID)

    async def _error(self, request_id, message: str, field: str, code: int = INVALID_REQUEST) -> None:
        """Binance's error answer, ``{"error": {"code": 2, "msg": ...}, "id": ...}`` (:data:`INVALID_REQUEST`, or
        :data:`INVALID_JSON`), with the same text as ``message`` and the field it is about in ``fields``."""
        body = {
            "error": {"code": code, "msg": message, "message": message, "fields": {field: message}},
            "id": request_id,
        }
        await self.send(text_data=json.dumps(body))

    async def _result(self, request_id, result) -> None:
        await self.send(text_data=json.dumps({"result": result, "id": request_id}))
