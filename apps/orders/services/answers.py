"""How a caller hears its command's outcome: Redis pub/sub, one channel per command (``orders_done_<token>``).

The queue and the outcomes live in PostgreSQL (:class:`~apps.orders.models.Command`, durable, applied and marked
done in one commit); only the wake-up of the waiting caller goes through Redis. A PostgreSQL NOTIFY would wake
every backend LISTENing in the database to read it (PostgreSQL signals all listeners of the database on each
NOTIFY, ``src/backend/commands/async.c``), so with a LISTEN per waiting caller each outcome cost the server
work per caller: 1.1 ms of PostgreSQL CPU per order outside the engine with 4 callers, 2.3 ms with 32
(``bench/matching.py``). The sequencer publishes at its commit (``transaction.on_commit``), so a rolled-back
batch wakes nobody; a publish that is lost (the sequencer killed between its commit and the publish, Redis
restarting) only delays the caller, which reads the committed outcome from the database at least every
:data:`POLL_SECONDS` while it waits: never a guess.
"""

import logging
import threading
import time
from collections.abc import Sequence

import redis
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
"""How often a waiting caller reads its command's status from the database, in case its wake-up was lost."""

_local = threading.local()
_client_lock = threading.Lock()
_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    """The process's Redis client (``settings.REDIS_URL``; its connection pool is shared by threads)."""
    global _client
    with _client_lock:
        if _client is None:
            _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
        return _client


def done_channel(token: str) -> str:
    """The Redis channel the caller of the command ``token`` waits on."""
    return f"orders_done_{token}"


def outcomes_publish_at_commit(answers: Sequence[tuple[str, str]]) -> None:
    """Publish ``(token, outcome JSON)`` pairs (``MARK_DONE``'s rows) to their callers when the current
    transaction commits, never if it rolls back. A failure is logged, never raised into the sequencer: its batch
    is committed, and a batch that raised would be applied again per command."""
    transaction.on_commit(lambda: _outcomes_publish(answers), robust=True)


def _outcomes_publish(answers: Sequence[tuple[str, str]]) -> None:
    """Publish the pairs in one round trip; a Redis error is logged, not raised (the callers read their outcomes
    from the database)."""
    if not answers:
        return
    try:
        with _redis().pipeline(transaction=False) as pipe:
            for token, payload in answers:
                pipe.publish(done_channel(token), payload)
            pipe.execute()
    except redis.RedisError:
        log.warning("engine.outcomes_publish_failed", exc_info=True, extra={"commands": len(answers)})


class Listener:
    """This thread's subscription to one command's channel at a time (:func:`listener`).

    :meth:`subscribe` returns once Redis confirms the subscription, so an outcome published after it (after the
    command is inserted) is not missed. Raises ``redis.RedisError`` when Redis cannot be reached.
    """

    def __init__(self) -> None:
        self.pubsub = _redis().pubsub(ignore_subscribe_messages=False)
        self.channel: str | None = None

    def subscribe(self, token: str) -> None:
        """Listen to the command ``token``'s channel (and to no other)."""
        self.unsubscribe()
        channel = done_channel(token)
        self.pubsub.subscribe(channel)
        self.channel = channel
        while True:  # the confirmation; messages left over from an earlier command are dropped
            message = self.pubsub.get_message(timeout=5)
            if message is None:
                raise redis.TimeoutError("Redis did not confirm the subscription")
            if message["type"] == "subscribe" and message["channel"].decode() == channel:
                return

    def get(self, timeout: float) -> str | None:
        """The outcome published on the subscribed channel within ``timeout`` seconds, or ``None``."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            message = self.pubsub.get_message(timeout=left)
            if message is not None and message["type"] == "message" and message["channel"].decode() == self.channel:
                return message["data"].decode()
        return None

    def unsubscribe(self) -> None:
        """Stop listening (the confirmation is read, and dropped, at the next :meth:`subscribe`)."""
        if self.channel is not None:
            self.channel = None
            self.pubsub.unsubscribe()

    def close(self) -> None:
        self.channel = None
        self.pubsub.close()


def listener() -> Listener:
    """This thread's :class:`Listener` (created on first use; replaced after :func:`listener_close`)."""
    current = getattr(_local, "listener", None)
    if current is None:
        current = _local.listener = Listener()
    return current


def listener_close() -> None:
    """Close this thread's listener (after a Redis error; tests)."""
    current = getattr(_local, "listener", None)
    if current is not None:
        _local.listener = None
        current.close()
