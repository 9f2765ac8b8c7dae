"""The sequencer: the one process applying a market's placements and cancels, a batch per transaction.

:class:`Sequencer` serves one or more markets (``manage.py run_engine --market X``). It
takes ``pg_advisory_lock(ENGINE_LOCK_CLASS, market id)`` on its connection for each of them
(in id order) before anything else: a second sequencer for the same market blocks there and
takes over when the first one's connection ends (failover; PostgreSQL releases a session's
advisory locks when it dies, SIGKILL included). It then listens for the rings of new commands
(:mod:`apps.core.doorbell`; it reads the queue at least every ``idle_seconds`` without one) and, in a
loop, reads up to ``settings.ORDERS_ENGINE_BATCH`` pending commands in id (arrival) order
and applies each market's share in one transaction.

The planned path (default, ``settings.ORDERS_ENGINE_PLANNED``; :mod:`apps.orders.services.batching`):
halts and resumes are commands too (:func:`apps.orders.services.markets.market_halt`), applied one by
one between the planned batches. The sequencer keeps each market's book in memory (:class:`~apps.orders.services.batching.MarketBook`),
plans the whole batch in memory exactly as inline placement would decide each command
(:mod:`apps.orders.engine.batch`), and writes it with set-based statements: one market lock,
one account lock, one ``entries_post``, one statement each for orders, trades and resting
orders. The book is read from the database when the sequencer starts, whenever the market's
sequence moved since its own last commit (every other writer of the market's orders bumps it:
an inline cancel, a halt or resume, the per-command path), and after any failed batch.

The per-command path (:func:`batch_apply`, the fallback of a planned batch that failed, say on a
deadlock or a database check): each command runs the same placement or cancel as inline mode,
in its own savepoint, so a refusal (insufficient funds, a filter) undoes only that command and
becomes its outcome.

Either way the commands are marked done with their outcomes in the batch's commit, and their
callers' answers handed at the commit to a publisher thread (:mod:`apps.orders.services.answers`),
so the next batch never waits on Redis; stopping (:meth:`Sequencer.stop`, SIGTERM) sends what is
still queued before :meth:`Sequencer.run` returns. A sequencer killed mid-batch committed nothing
of it: its successor applies those commands again from the start, and no command is applied twice
(done and effect share a commit).

Any database error on the per-command path other than a deadlock (which reruns the batch)
ends the process: its connection, and with it the advisory lock, may be gone, and only the
lock holder may write.
"""

import gc
import json
import logging
import time
from collections.abc import Callable, Sequence

import orjson
from django.conf import settings
from django.db import OperationalError, connection, transaction

from apps.core import doorbell
from apps.core.errors import DomainError
from apps.ledger.db import PreparedCursor
from apps.ledger.transactions import retrying_atomic

from ..models import CommandKind, Market, MarketStatus
from ..store import commands as queue
from ..store.commands import QueuedCommand
from . import answers, batching, cancel, markets, placement
from .commands import domain_outcome

log = logging.getLogger(__name__)

ENGINE_LOCK_CLASS = 0x4F524452
"""The first key of the sequencers' advisory locks (``pg_advisory_lock(ENGINE_LOCK_CLASS, market id)``)."""

ENGINE_PLAN_CACHE_MODE = "force_generic_plan"
"""``plan_cache_mode`` of a sequencer's connection: its prepared statements (:class:`~apps.ledger.db.PreparedCursor`:
the pending read, the locks, the batch's writes) are planned once, not at every execution. With PostgreSQL's
default (``auto``) the statements with array parameters kept custom plans, planned again at each bind: 0.58 ms of
PostgreSQL's time per batch of about six commands, 0.18 ms with generic plans whose execution took as long
(``bench/matching.py``, paced 1,000/s, ``log_min_duration_statement`` per bind and execute). Django's own
queries bind client-side (no parameters reach PostgreSQL), so they are not affected."""

MARKETS_CHECK_SECONDS = 2.0
"""How often a sequencer serving every market (``run_engine --all``) looks for markets created since it started."""


_PLANNED = (CommandKind.PLACE, CommandKind.CANCEL, CommandKind.CANCEL_ALL)
"""The kinds a planned batch applies (:mod:`apps.orders.services.batching`); halts and resumes run on their own."""


def _apply(command: QueuedCommand) -> dict:
    """Apply one command in a savepoint of the batch's transaction; return its outcome."""
    try:
        if command.kind in (CommandKind.HALT, CommandKind.RESUME):
            status = MarketStatus.HALTED if command.kind == CommandKind.HALT else MarketStatus.ACTIVE
            market = markets.market_status_apply(status=status, **command.payload)
            return {"market_id": market.id}
        if command.kind == CommandKind.CANCEL_ALL:
            orders = cancel.open_orders_cancel(market_id=command.market_id, **command.payload)
            return {"order_ids": [order.id for order in orders]}
        if command.kind == CommandKind.PLACE:
            order = placement.order_place(**command.payload)
            return {"order_id": order.id, "placed": queue.placed_state(order)}  # before the batch's later commands
        if "client_order_id" in command.payload:
            order = cancel.order_cancel_by_client_id(market_id=command.market_id, **command.payload)
        else:
            order = cancel.order_cancel(**command.payload)
    except DomainError as exc:
        return domain_outcome(exc)
    except OperationalError:
        raise  # a deadlock reruns the batch; anything else ends the process (see the module)
    except Exception as exc:  # a bug on one command must not stop the market: its caller gets a 500
        log.exception("engine.command_failed", extra={"command": command.id})
        return {"error": {"type": "internal", "message": f"{type(exc).__name__}: {exc}"}}
    return {"order_id": order.id}


@retrying_atomic
def batch_apply(commands: Sequence[QueuedCommand]) -> list[dict]:
    """Apply ``commands`` (in order) and mark them done with their outcomes, in one transaction.

    The callers' answers (:data:`apps.orders.store.commands.MARK_DONE`) are published at the commit
    (:mod:`apps.orders.services.answers`). Returns the outcomes. A deadlock reruns the whole batch (nothing
    of it was committed, and nobody is answered).
    """
    outcomes = [_apply(command) for command in commands]
    command_ids = [c.id for c in commands]
    with connection.cursor() as cursor:
        cursor.execute(queue.MARK_DONE, [command_ids, json.dumps(outcomes)])
        marked = cursor.fetchall()
    answers.marked_publish_at_commit(command_ids, marked)
    return outcomes


class LockLost(RuntimeError):
    """The sequencer's connection, and with it its advisory locks, is gone: the process must end (see the module)."""


class Sequencer:
    """The writer of ``market_ids``' orders (see the module). :meth:`run` until :meth:`stop`.

    With ``every_market`` (``run_engine --all``) it also serves the markets created while it runs: every
    ``markets_check_seconds`` it takes the advisory lock of each market it does not serve yet, without waiting
    (:meth:`markets_adopt`); a market whose lock another sequencer holds is left to that one, and tried again at
    the next check (so it is taken over if that sequencer dies with no standby). A sequencer of several named
    markets does the same for those it could not lock at the start (:meth:`acquire`). ``wanted`` is the markets
    it would serve (``None``: every market); ``market_ids`` those it serves.
    """

    def __init__(
        self,
        market_ids: Sequence[int],
        *,
        batch: int | None = None,
        idle_seconds: float | None = None,
        every_market: bool = False,
        markets_check_seconds: float = MARKETS_CHECK_SECONDS,
    ):
        self.market_ids = sorted(set(market_ids))
        self.wanted: list[int] | None = None if every_market else list(self.market_ids)
        self.batch = batch or settings.ORDERS_ENGINE_BATCH
        self.idle_seconds = settings.ORDERS_ENGINE_IDLE_SECONDS if idle_seconds is None else idle_seconds
        self.markets_check_seconds = markets_check_seconds
        self.stopping = False
        self.books: dict[int, batching.MarketBook] = {}
        self.doorbell = doorbell.Doorbell([])
        self.locked_connection: object | None = None  # the psycopg connection holding the advisory locks

    def stop(self) -> None:
        """Finish the batch in progress, then return from :meth:`run` (once the answers queued are sent)."""
        self.stopping = True

    def acquire(self) -> None:
        """Take the markets' advisory locks and listen for the rings of their commands. A sequencer of one named
        market waits for its lock (a standby, taking over the moment the other sequencer's session ends). Any other
        never waits: a market whose lock another sequencer holds is left to it, and :meth:`markets_adopt` takes it
        once it is free (break-it reviews: ``run_engine --all`` beside a ``--market`` one, and a standby of two
        markets whose first one's sequencer died, each held the markets it had locked while it waited for the next,
        unserved, for as long as the other sequencer lived)."""
        connection.ensure_connection()
        taken = []
        with connection.cursor() as cursor:
            cursor.execute(f"SET plan_cache_mode = {ENGINE_PLAN_CACHE_MODE}")
            for market_id in self.market_ids:
                if self.wanted is not None and len(self.wanted) == 1:
                    cursor.execute("SELECT pg_advisory_lock(%s, %s)", [ENGINE_LOCK_CLASS, market_id])
                    taken.append(market_id)
                    continue
                cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [ENGINE_LOCK_CLASS, market_id])
                if cursor.fetchone()[0]:
                    taken.append(market_id)  # else another sequencer serves it: adopted once free (markets_adopt)
        self.market_ids = taken
        self.locked_connection = connection.connection
        self.doorbell.add(*(queue.engine_channel(market_id) for market_id in self.market_ids))
        self.books_load()

    def markets_adopt(self) -> list[int]:
        """Serve every market not served yet whose advisory lock is free (``pg_try_advisory_lock``: never waits),
        listening for the rings of its commands; return the ids adopted. Its book is read at its first batch."""
        adopted = []
        markets = Market.objects.exclude(id__in=self.market_ids)
        if self.wanted is not None:
            markets = markets.filter(id__in=self.wanted)
        rows = markets.order_by("id").values_list("id", "base_id", "quote_id")
        with connection.cursor() as cursor:
            for market_id, base_id, quote_id in rows:
                cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [ENGINE_LOCK_CLASS, market_id])
                if not cursor.fetchone()[0]:
                    continue  # another sequencer serves it
                self.doorbell.add(queue.engine_channel(market_id))
                self.books[market_id] = batching.MarketBook(market_id, base_id, quote_id)
                adopted.append(market_id)
        if adopted:
            self.market_ids = sorted([*self.market_ids, *adopted])
            log.info("engine.markets_adopted", extra={"markets": adopted})
        return adopted

    def adopting(self) -> bool:
        """Whether a market it would serve may still need adopting (:meth:`markets_adopt`)."""
        return self.wanted is None or len(self.market_ids) < len(self.wanted)

    def books_load(self) -> None:
        """Start each market's in-memory book afresh (read from the database at its next batch)."""
        rows = Market.objects.filter(id__in=self.market_ids).values_list("id", "base_id", "quote_id")
        self.books = {
            market_id: batching.MarketBook(market_id, base_id, quote_id) for market_id, base_id, quote_id in rows
        }

    def pending(self) -> list[QueuedCommand]:
        """The oldest pending commands of the markets served, at most one batch."""
        with PreparedCursor() as cursor:  # read between every two batches: parsed and planned once per connection
            cursor.execute(queue.PENDING, {"markets": self.market_ids, "limit": self.batch})
            rows = cursor.fetchall()
        # Django's connection leaves jsonb as text (its JSONField decodes it).
        return [
            QueuedCommand(
                id_, market_id, kind, user_id, token, orjson.loads(payload) if isinstance(payload, str) else payload
            )
            for id_, market_id, kind, user_id, token, payload in rows
        ]

    def run_once(self) -> int:
        """Apply what is pending (one batch per market); return how many commands were applied. Raises
        :class:`LockLost` (see :meth:`lock_check`)."""
        self.lock_check()
        commands = self.pending()
        by_market: dict[int, list[QueuedCommand]] = {}
        for command in commands:
            by_market.setdefault(command.market_id, []).append(command)
        for market_id, group in by_market.items():
            self.apply(market_id, group)
        return len(commands)

    def apply(self, market_id: int, commands: Sequence[QueuedCommand]) -> list[dict]:
        """Apply one market's commands in order, in one transaction per run of them: each run of placements
        and cancels (of one order, or of a user's open orders) as one planned batch (:meth:`apply_planned`), each halt or resume on its own
        (:func:`batch_apply`: it changes what the commands after it may do). Returns the outcomes."""
        outcomes: list[dict] = []
        run: list[QueuedCommand] = []
        for command in [*commands, None]:
            if command is not None and command.kind in _PLANNED:
                run.append(command)
                continue
            if run:
                outcomes += self.apply_planned(market_id, run)
                run = []
            if command is not None:
                outcomes += batch_apply([command])
        return outcomes

    def apply_planned(self, market_id: int, commands: Sequence[QueuedCommand]) -> list[dict]:
        """Apply placements and cancels planned in memory and written set-based (:func:`batching.batch_write`),
        or per command (:func:`batch_apply`) when ``settings.ORDERS_ENGINE_PLANNED`` is off or the planned
        write failed (rolled back; the book is read again at the next batch)."""
        state = self.books.get(market_id)
        if settings.ORDERS_ENGINE_PLANNED and state is not None:
            try:
                with transaction.atomic():
                    return batching.batch_write(state, commands)
            except answers.CommandsAppliedElsewhere:
                raise
            except Exception:
                state.sequence = None
                log.warning("engine.batch_fallback", exc_info=True, extra={"market": market_id})
            self.lock_check()  # a failed rollback closed the connection: the fallback would write on a new one
        return batch_apply(commands)

    def lock_check(self) -> None:
        """Raise :class:`LockLost` when the connection that took the markets' advisory locks is gone: Django closes a
        connection whose rollback failed (killed, say, mid-batch) and opens a new one at the next query, which holds
        no lock while a standby may serve the markets already (break-it review: both wrote, orders were applied
        two to four times)."""
        if connection.connection is not self.locked_connection:
            raise LockLost(
                "The database connection holding the markets' advisory locks is gone: stopping (restarted, this "
                "sequencer waits for the locks again)."
            )

    def run(self, *, on_ready: Callable[[], None] | None = None) -> None:
        """Acquire the markets (and freeze the heap: ``gc.freeze()``), then apply commands as they arrive until
        stopped (adopting, every ``markets_check_seconds``, the markets it would serve that are free: see
        :meth:`acquire`); on the way out (stopped, or raising) send the answers still queued
        (:func:`apps.orders.services.answers.publisher_stop`)."""
        try:
            self.acquire()
            # Everything alive now (Django, the apps, the books) lives as long as the process: out of the cyclic
            # garbage collector's reach, a full collection scans only what came after. Without this, each one
            # scanned the whole start-up heap, a 56-61 ms pause of the market (bench/matching.py, paced 500/s):
            # the p99 of every order queued meanwhile.
            gc.freeze()
            log.info("engine.ready", extra={"markets": self.market_ids})
            if on_ready is not None:
                on_ready()
            next_markets_check = time.monotonic()
            while not self.stopping:
                if self.adopting() and time.monotonic() >= next_markets_check:
                    self.markets_adopt()
                    next_markets_check = time.monotonic() + self.markets_check_seconds
                if not self.run_once():
                    self.doorbell.wait(self.idle_seconds)
        finally:
            self.doorbell.close()
            answers.publisher_stop()
