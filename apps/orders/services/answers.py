"""How a caller hears its command's outcome: Redis pub/sub, one reply channel per waiting thread.

The queue and the outcomes live in PostgreSQL (:class:`~apps.orders.models.Command`, durable, applied and marked
done in one commit); only the wake-up of the waiting caller goes through Redis. A PostgreSQL NOTIFY would wake
every backend LISTENing in the database to read it (PostgreSQL signals all listeners of the database on each
NOTIFY, ``src/backend/commands/async.c``), so with a LISTEN per waiting caller each outcome cost the server
work per caller: 1.1 ms of PostgreSQL CPU per order outside the engine with 4 callers, 2.3 ms with 32
(``bench/matching.py``).

The caller's side: each thread of each process has one :class:`Listener`, subscribed once (confirmed by Redis
before its first command is written) to a reply channel of its own (``orders_reply_<random hex>``), which every
command it submits names (``Command.reply_to``): a command costs no SUBSCRIBE or UNSUBSCRIBE. Each message is
``"<token> <answer JSON>"``; :meth:`Listener.get` takes only the answer to the command it waits for, and drops any
other (a late answer to an earlier command of the thread, whose wait had timed out). A forked child never uses
its parent's listener (its subscription is the parent's socket): it opens its own, on a new channel.

The sequencer's side: it hands each batch's answers to the process's :class:`Publisher` at its commit
(``transaction.on_commit``: a rolled-back batch answers nobody), a thread that sends them to Redis, so the next
batch never waits on Redis. A publish that is lost (the sequencer killed between its commit and the publish,
Redis down or slow, the publisher's queue full) only delays the caller, which reads the committed outcome from the
database at least every :data:`POLL_SECONDS` while it waits: never a guess. :func:`publisher_stop` (the
sequencer's shutdown) sends what is queued first.
"""

import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Sequence

import redis
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
"""How often a waiting caller reads its command's status from the database, in case its wake-up was lost."""

PUBLISH_QUEUE_BATCHES = 10_000
"""How many committed batches' answers may wait for the publisher; beyond, a batch's answers are dropped (logged;
their callers read their outcomes from the database)."""

STOP_SECONDS = 5.0
"""How long :func:`publisher_stop` waits for the queued answers to be sent."""

Answer = tuple[str, str, str]
"""``(reply channel, command token, answer JSON)``: a row of :data:`apps.orders.store.commands.MARK_DONE`."""

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


class CommandsAppliedElsewhere(RuntimeError):
    """A batch's ``MARK_DONE`` found some of its commands no longer pending: another sequencer applied them (this one
    lost its advisory lock and wrote on). Raised before the commit: the batch must roll back, so nothing of it is
    applied twice, and the process end (break-it review: orders placed, and market orders filled, two to four times)."""


def marked_publish_at_commit(command_ids: Sequence[int], marked: Sequence[tuple]) -> None:
    """Check that ``MARK_DONE`` marked every one of ``command_ids`` (its rows, ``marked``: one per command marked), else
    raise :class:`CommandsAppliedElsewhere`; then publish the answers of the callers that listen
    (:func:`outcomes_publish_at_commit`)."""
    if len(marked) != len(command_ids):
        raise CommandsAppliedElsewhere(
            f"{len(command_ids) - len(marked)} of the batch's {len(command_ids)} commands were no longer pending: "
            "another sequencer applied them"
        )
    outcomes_publish_at_commit([row for row in marked if row[0]])


def outcomes_publish_at_commit(answers: Sequence[Answer]) -> None:
    """Hand ``answers`` (``MARK_DONE``'s rows) to the process's :class:`Publisher` when the current transaction
    commits, never if it rolls back. Never blocks on Redis and never raises into the sequencer: its batch is
    committed, and a batch that raised would be applied again per command."""
    if answers:
        transaction.on_commit(lambda: _publisher().put(answers), robust=True)


def _outcomes_publish(answers: Sequence[Answer]) -> None:
    """Publish ``answers`` in one round trip; any error is logged, not raised (the callers read their outcomes
    from the database)."""
    try:
        with _redis().pipeline(transaction=False) as pipe:
            for channel, token, answer in answers:
                pipe.publish(channel, f"{token} {answer}")
            pipe.execute()
    except Exception:
        log.warning("engine.outcomes_publish_failed", exc_info=True, extra={"commands": len(answers)})


class Publisher:
    """A thread publishing the answers queued by :meth:`put`, in order, what is waiting in one round trip.

    :meth:`put` never blocks; :meth:`stop` sends what is queued, then ends the thread. Redis errors are logged and
    the answers dropped (their callers poll the database).
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.queue: queue.Queue[Sequence[Answer] | None] = queue.Queue(maxsize=PUBLISH_QUEUE_BATCHES)
        self.thread = threading.Thread(target=self._run, name="answers-publisher", daemon=True)
        self.thread.start()

    def put(self, answers: Sequence[Answer]) -> None:
        """Queue one batch's answers (dropped, and logged, when the queue is full)."""
        try:
            self.queue.put_nowait(answers)
        except queue.Full:
            log.warning("engine.outcomes_publish_dropped", extra={"commands": len(answers)})

    def _run(self) -> None:
        while True:
            batches = [self.queue.get()]
            while True:
                try:
                    batches.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            waiting = [answer for batch in batches if batch is not None for answer in batch]
            if waiting:
                _outcomes_publish(waiting)
            if None in batches:
                return

    def stop(self, timeout: float) -> None:
        """Publish what is queued (for at most ``timeout`` seconds), then end the thread."""
        try:
            self.queue.put(None, timeout=timeout)
        except queue.Full:
            log.warning("engine.outcomes_publish_stop_timeout")
            return
        self.thread.join(timeout)


_publisher_lock = threading.Lock()
_publisher_current: Publisher | None = None


def _publisher() -> Publisher:
    """The process's :class:`Publisher`: started on first use, and again if its thread died or the process
    forked since."""
    global _publisher_current
    with _publisher_lock:
        current = _publisher_current
        if current is None or current.pid != os.getpid() or not current.thread.is_alive():
            current = _publisher_current = Publisher()
        return current


def publisher_stop(timeout: float = STOP_SECONDS) -> None:
    """Send the answers queued in this process (waiting at most ``timeout`` seconds) and stop its publisher
    (the sequencer's shutdown; the next answers start a new one)."""
    global _publisher_current
    with _publisher_lock:
        current, _publisher_current = _publisher_current, None
    if current is not None and current.pid == os.getpid() and current.thread.is_alive():
        current.stop(timeout)


class Listener:
    """This thread's subscription to its own reply channel, :attr:`channel` (:func:`listener`).

    Created subscribed: Redis has confirmed the subscription, so an answer published after it (after a command
    naming :attr:`channel` is inserted) is not missed. Raises ``redis.RedisError`` when Redis cannot be reached.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.channel = f"orders_reply_{uuid.uuid4().hex}"
        self.pubsub = _redis().pubsub()
        try:
            self.pubsub.subscribe(self.channel)
            message = self.pubsub.get_message(timeout=5)
            if message is None or message["type"] != "subscribe":
                raise redis.TimeoutError("Redis did not confirm the subscription")
        except BaseException:
            self.pubsub.close()
            raise

    def get(self, token: str, timeout: float) -> str | None:
        """The answer (JSON) to the command ``token`` published within ``timeout`` seconds, or ``None``; answers
        to other commands (late ones, after their caller stopped waiting) are dropped."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            message = self.pubsub.get_message(timeout=left)
            if message is None or message["type"] != "message":
                continue
            answered, _, answer = message["data"].decode().partition(" ")
            if answered == token:
                return answer
        return None

    def close(self) -> None:
        """Close the subscription's connection."""
        self.pubsub.close()


def listener() -> Listener:
    """This thread's :class:`Listener` (created on first use, and again after :func:`listener_close` or in a
    forked child). Raises ``redis.RedisError`` when Redis cannot be reached."""
    current = getattr(_local, "listener", None)
    if current is None or current.pid != os.getpid():
        _local.listener = None  # a forked child's copy of its parent's listener is dropped, never used
        current = _local.listener = Listener()
    return current


def listener_close() -> None:
    """Close this thread's listener (after a Redis error; tests). A copy inherited through a fork is only dropped:
    its connection is the parent's."""
    current = getattr(_local, "listener", None)
    if current is not None:
        _local.listener = None
        if current.pid == os.getpid():
            current.close()
