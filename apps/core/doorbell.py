"""Wake-ups of the long-running readers of a table (the sequencer, the stream relay) through Redis pub/sub.

The data lives in PostgreSQL; a ring carries nothing and only says "read now". A writer rings the reader's
channel once its rows are committed (:func:`ring_at_commit` inside a transaction, :func:`ring` after an autocommit
statement); the reader waits on a :class:`Doorbell` between its reads, and never longer than its idle timeout. A
lost ring (Redis down or restarting, a writer killed between its commit and its ring) therefore delays the reader
by at most that timeout and loses nothing; while the reader cannot reach Redis it reads every
:data:`UNSUBSCRIBED_POLL_SECONDS` instead.

Why not PostgreSQL's NOTIFY, which the readers LISTENed to before: a transaction that NOTIFYs takes one lock for
the whole server at its commit and holds it until its commit record is flushed (``PreCommit_Notify``,
``src/backend/commands/async.c``), so notifying commits follow one another, each one's fsync included. With a NOTIFY
per queued command and per stream outbox write, sampling ``pg_stat_activity`` every 20 ms through
``bench/matching.py``'s four-market case found most of the backends that waited doing so on that lock
(``Lock:object``): 141 command inserts and 96 commits (engines' batches) of the 400 samples.
"""

import logging
import threading
import time
from collections.abc import Iterable

import redis
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

UNSUBSCRIBED_POLL_SECONDS = 0.05
"""How long a reader that cannot reach Redis waits between its reads of the database."""

RESUBSCRIBE_SECONDS = 2.0
"""How often a reader that lost Redis tries to subscribe again."""

CONNECT_SECONDS = 1.0
"""Redis connect and socket timeouts of the doorbell's client: a ring never holds a caller longer."""

_client_lock = threading.Lock()
_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    """The process's doorbell client (``settings.REDIS_URL``; redis-py's pool is shared by threads and starts
    anew in a forked child)."""
    global _client
    with _client_lock:
        if _client is None:
            _client = redis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=CONNECT_SECONDS, socket_connect_timeout=CONNECT_SECONDS
            )
        return _client


def ring(channel: str) -> None:
    """Wake the reader of ``channel`` now (one PUBLISH). Call it after the commit of what it should read; a Redis
    error is logged, never raised (the reader reads at its idle timeout anyway)."""
    try:
        _redis().publish(channel, b"")
    except redis.RedisError as exc:
        log.warning("doorbell.ring_failed", extra={"channel": channel, "error": str(exc)})


class _Ring:
    """:func:`ring` of ``channel`` as a commit callback. The callbacks of one channel registered in one transaction
    share the first one's :attr:`rung`, so the first of them to run at the commit rings and the others do not."""

    def __init__(self, channel: str, first: "_Ring | None" = None):
        self.channel = channel
        self.first = first or self
        self.rung = False
        self.__qualname__ = ring.__qualname__  # Django logs a failing robust callback by it

    def __call__(self) -> None:
        if not self.first.rung:
            self.first.rung = True
            ring(self.channel)


def ring_at_commit(channel: str) -> None:
    """:func:`ring` ``channel`` when the current transaction commits (never if it rolls back); at once outside a
    transaction (autocommit: the write is committed). Once per commit and channel, however many writes ask: a ring
    says "read now", and a batch of 200 deposits' stream events needs one PUBLISH, not 200. (The callbacks are all
    registered, so one whose savepoint rolls back drops only itself: another one rings.)"""
    pending = transaction.get_connection().run_on_commit
    first = next((c for _, c, _ in pending if isinstance(c, _Ring) and c.channel == channel), None)
    transaction.on_commit(_Ring(channel, first), robust=True)


class Doorbell:
    """A reader's subscription to its ``channels``: :meth:`wait` returns at a ring or after its timeout.

    Subscribed (and confirmed by Redis) when created, so a ring sent after the reader's next read of the database
    is not missed; rings that came meanwhile make the next :meth:`wait` return at once. Never raises a Redis
    error: without Redis, :meth:`wait` sleeps :data:`UNSUBSCRIBED_POLL_SECONDS` and subscribes again every
    :data:`RESUBSCRIBE_SECONDS`.
    """

    def __init__(self, channels: Iterable[str]):
        self.channels = set(channels)
        self.pubsub: redis.client.PubSub | None = None
        self.rang = False  # a ring read while a subscription was being confirmed
        self.next_subscribe = 0.0
        self._subscribe()

    def add(self, *channels: str) -> None:
        """Listen on ``channels`` too (confirmed before returning, when Redis can be reached)."""
        self.channels.update(channels)
        if self.pubsub is not None and channels:
            self._confirm(sorted(channels))

    def wait(self, timeout: float) -> None:
        """Return when a ring arrives (or had arrived since the last wait) or after ``timeout`` seconds."""
        if self.pubsub is None and time.monotonic() >= self.next_subscribe:
            self._subscribe()
        if self.rang:
            self.rang = False
            return
        if self.pubsub is None:
            time.sleep(min(timeout, UNSUBSCRIBED_POLL_SECONDS))
            return
        try:
            message = self.pubsub.get_message(timeout=timeout)
            while message is not None:  # every ring already here is answered by the same read
                message = self.pubsub.get_message(timeout=0)
        except redis.RedisError as exc:
            log.warning("doorbell.lost", extra={"channels": sorted(self.channels), "error": str(exc)})
            self._lost()

    def close(self) -> None:
        """Close the subscription's connection."""
        if self.pubsub is not None:
            self.pubsub.close()
            self.pubsub = None

    def _subscribe(self) -> None:
        self.pubsub = _redis().pubsub()
        if self.channels:
            self._confirm(sorted(self.channels))

    def _confirm(self, channels: list[str]) -> None:
        """Subscribe to ``channels`` and wait until Redis confirms each; without Redis, left unsubscribed."""
        pubsub = self.pubsub
        if pubsub is None:
            return
        try:
            pubsub.subscribe(*channels)
            for _ in channels:
                message = pubsub.get_message(timeout=CONNECT_SECONDS)
                while message is not None and message["type"] == "message":
                    self.rang = True
                    message = pubsub.get_message(timeout=CONNECT_SECONDS)
                if message is None:
                    raise redis.TimeoutError("Redis did not confirm the subscription")
        except redis.RedisError as exc:
            log.warning("doorbell.unsubscribed", extra={"channels": sorted(self.channels), "error": str(exc)})
            self._lost()

    def _lost(self) -> None:
        self.close()
        self.next_subscribe = time.monotonic() + RESUBSCRIBE_SECONDS
