"""WebSocket paths Binance's clients use beyond apps.streams' ``/ws/<stream>`` and ``/stream``.

- ``/ws/<n>`` (``n`` a small number: CCXT's connection index) opens a raw connection with no stream
  yet; ``SUBSCRIBE`` adds them (as ``/ws`` does).
- ``/ws-api/v3``: Binance's WebSocket API, the part user-data clients need: ``ping``, ``time`` and
  ``userDataStream.subscribe.signature`` / ``userDataStream.unsubscribe`` (of one ``subscriptionId``, or
  of every subscription without it: Binance's WebSocket API, "Unsubscribe from User Data Stream"; ids are
  not reused within a connection). A subscription is signed
  like a REST request, over ``name=value`` of the parameters sorted by name, joined with ``&``,
  values not percent-encoded (Binance's "SIGNED request security" of the WebSocket API); events then arrive as ``{"subscriptionId": n, "event": {...}}``
  (``executionReport``, ``outboundAccountPosition``), the user stream of apps.streams.
"""

import asyncio
import contextlib
import json
import math
import re
import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import timezone

from apps.accounts.models import ApiKey
from apps.streams.connections import CLOSE_POLICY_VIOLATION, MessageBudget
from apps.streams.consumers import (
    CLOSE_EXPIRED,
    REQUEST_ID_RULE,
    StreamConsumer,
    first_delivery,
    request_id_valid,
)
from apps.streams.groups import user_group
from exchange.client_ip import scope_client_ip

from .errors import (
    BAD_API_KEY_FMT,
    ILLEGAL_CHARS,
    MANDATORY_PARAM_EMPTY_OR_MALFORMED,
    TOO_MANY_REQUESTS,
    UNSUPPORTED_OPERATION,
    BinanceError,
    illegal,
    rejected_key,
)
from .keys import key_authenticate, signing_secret
from .params import MAX_INT64, Params
from .signing import recv_window_check, recv_window_param, signature_check


class MarketSocket(StreamConsumer):
    """A raw market-data connection opened at ``/ws/<n>``: streams come by ``SUBSCRIBE``."""

    async def connect(self):
        self.init_state()
        self.combined = False
        await self.accept()


def _signed_key(params: dict, client_ip: str) -> ApiKey:
    """The API key of a signed ``userDataStream.subscribe.signature``; raises :class:`BinanceError` as REST would."""
    if not all(isinstance(value, (str, int)) and not isinstance(value, bool) for value in params.values()):
        raise BinanceError(ILLEGAL_CHARS, "Parameters are strings or numbers.")
    values = {name: str(value) for name, value in params.items()}
    raw_key = values.get("apiKey", "")
    if not raw_key or len(raw_key) > 128 or not raw_key.isprintable():
        raise BinanceError(BAD_API_KEY_FMT, "API-key format invalid.", status=401)
    checked = Params(values.items())
    recv_window_check(
        timestamp=checked.integer("timestamp"),
        recv_window=recv_window_param(checked),
        now_ms=int(time.time() * 1000),
    )
    signature = checked.text("signature", required=True, pattern=re.compile(r"[0-9a-fA-F]{64}"))
    key = key_authenticate(raw_key, client_ip=client_ip)
    if "read" not in key.scopes:
        raise rejected_key()
    payload = "&".join(f"{name}={value}" for name, value in sorted(values.items()) if name != "signature")
    signature_check(secret=signing_secret(key), payload=payload, signature=signature)
    return key


def _subscription_ids(params: dict, active: list[int]) -> list[int]:
    """The subscriptions a ``userDataStream.unsubscribe`` ends: every one in ``active`` without
    ``subscriptionId``, else that one if it is active (none if not: Binance's "if it exists").

    Raises :class:`BinanceError` -1100 when ``subscriptionId`` is not a whole number (a JSON number or digits).
    """
    if "subscriptionId" not in params:
        return active
    value = params["subscriptionId"]
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise illegal("subscriptionId", f"0..{MAX_INT64}")
    subscription_id = Params([("subscriptionId", str(value))]).integer("subscriptionId", required=True)
    return [subscription_id] if subscription_id in active else []


def _key_expiry(key_id: int) -> float | None:
    """When API key ``key_id`` expires (epoch seconds, ``math.inf`` for never), or None when it is revoked,
    expired or gone: its subscriptions end."""
    key = ApiKey.objects.filter(pk=key_id).first()
    if key is None or not key.is_active:
        return None
    return key.expires_at.timestamp() if key.expires_at is not None else math.inf


class WsApiConsumer(AsyncWebsocketConsumer):
    """One ``/ws-api/v3`` connection: requests ``{"id", "method", "params"}``, answers ``{"id", "status", ...}``.

    A subscription lives as long as the API key that signed it: the keys are checked every
    ``STREAMS_TOKEN_CHECK_SECONDS`` and at the soonest expiry; once one is revoked or expired, each of its
    subscriptions gets Binance's ``{"e": "eventStreamTerminated", "E": <ms>}`` and the connection is closed
    with code 4401 (as a user stream whose key expired)."""

    async def connect(self):
        self.subscriptions: dict[int, str] = {}  # subscription id -> group
        self.next_subscription_id = 0
        self.subscription_keys: dict[int, int] = {}  # subscription id -> the id of the API key that signed it
        self.key_watch: asyncio.Task | None = None
        self.seen: dict[str, dict] = {}  # per group and sequence: the (update id, part) last sent
        self.budget = MessageBudget()
        await self.accept()

    async def disconnect(self, code):
        watch = getattr(self, "key_watch", None)
        if watch is not None and watch is not asyncio.current_task():
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        for group in getattr(self, "subscriptions", {}).values():
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None):
        if not self.budget.spend():  # past the connection's budget: Binance's -1003, and closed
            message = f"More than {self.budget.rate} requests a second: connection closed."
            await self._answer(None, 429, error={"code": TOO_MANY_REQUESTS, "msg": message})
            await self.close(code=CLOSE_POLICY_VIOLATION)
            return
        try:
            request = json.loads(text_data or "")
            request_id, method, params = request.get("id"), request["method"], request.get("params", {})
            if not isinstance(params, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # Recursion: nested too deeply
            await self._answer(
                None,
                400,
                error={"code": MANDATORY_PARAM_EMPTY_OR_MALFORMED, "msg": 'Send {"id", "method", "params": {}}.'},
            )
            return
        if not request_id_valid(request_id):
            await self._answer(None, 400, error={"code": MANDATORY_PARAM_EMPTY_OR_MALFORMED, "msg": REQUEST_ID_RULE})
            return
        try:
            if method == "ping":
                await self._answer(request_id, 200, result={})
            elif method == "time":
                await self._answer(request_id, 200, result={"serverTime": int(time.time() * 1000)})
            elif method == "userDataStream.subscribe.signature":
                key = await database_sync_to_async(_signed_key)(params, scope_client_ip(self.scope))
                subscription_id = self.next_subscription_id
                self.next_subscription_id += 1
                group = user_group(key.user_id)
                await self.channel_layer.group_add(group, self.channel_name)
                self.subscriptions[subscription_id] = group
                self.subscription_keys[subscription_id] = key.pk
                if self.key_watch is None:
                    self.key_watch = asyncio.create_task(self._watch_keys())
                await self._answer(request_id, 200, result={"subscriptionId": subscription_id})
            elif method == "userDataStream.unsubscribe":
                await self._unsubscribe(_subscription_ids(params, list(self.subscriptions)))
                await self._answer(request_id, 200, result={})
            else:
                raise BinanceError(UNSUPPORTED_OPERATION, "This operation is not supported.")
        except BinanceError as error:
            await self._answer(request_id, error.status, error=error.body())

    async def _unsubscribe(self, subscription_ids: list[int]) -> None:
        """End these subscriptions; a group is left once no remaining subscription reads it."""
        for subscription_id in subscription_ids:
            group = self.subscriptions.pop(subscription_id)
            del self.subscription_keys[subscription_id]
            if group not in self.subscriptions.values():
                await self.channel_layer.group_discard(group, self.channel_name)

    async def stream_event(self, message):
        """A user event from the relay: sent once per subscription on its group; a repeat (a relay round
        published again after a crash) is dropped as on ``/ws/<listenKey>``."""
        if message["last"] is not None:
            seen = self.seen.setdefault(message["group"], {})
            if not first_delivery(seen, message):
                return
            seen[message.get("sequence")] = (message["last"], message.get("part", 0))
        for subscription_id, group in self.subscriptions.items():
            if group == message["group"]:
                await self.send(text_data=f'{{"subscriptionId":{subscription_id},"event":{message["data"]}}}')

    async def _watch_keys(self) -> None:
        """Until every subscription is gone: check the signing keys; end the session on the first one revoked
        or expired."""
        while self.subscription_keys:
            soonest = math.inf
            for key_id in set(self.subscription_keys.values()):
                expires_at = await database_sync_to_async(_key_expiry)(key_id)
                if expires_at is None:
                    await self._key_ended(key_id)
                    return
                soonest = min(soonest, expires_at)
            wait = min(settings.STREAMS_TOKEN_CHECK_SECONDS, soonest - timezone.now().timestamp())
            await asyncio.sleep(max(0.0, wait))
        self.key_watch = None

    async def _key_ended(self, key_id: int) -> None:
        event = json.dumps({"e": "eventStreamTerminated", "E": time.time_ns() // 1_000_000})
        for subscription_id, signed_by in self.subscription_keys.items():
            if signed_by == key_id:
                await self.send(text_data=f'{{"subscriptionId":{subscription_id},"event":{event}}}')
        await self.close(code=CLOSE_EXPIRED, reason="The API key of this session was revoked or expired.")

    async def _answer(self, request_id, status: int, *, result=None, error=None) -> None:
        body = {"id": request_id, "status": status, **({"error": error} if error else {"result": result})}
        await self.send(text_data=json.dumps(body))
