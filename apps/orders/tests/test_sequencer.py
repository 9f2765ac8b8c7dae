"""The sequencer as real processes (``manage.py run_engine``): answers, SIGKILL mid-batch, failover,
idempotent retries across restarts, and the caller's bounded wait."""

import gc
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from django.conf import settings as django_settings
from django.db import connection, connections
from django.utils import timezone

from apps.ledger.errors import IdempotencyConflict
from apps.ledger.models import Asset
from apps.ledger.reconciliation import reconcile
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.errors import MarketHalted, OrderStatusUnknown
from apps.orders.health import engine_health
from apps.orders.models import Command, CommandKind, CommandStatus, Market, Order, OrderStatus, Trade
from apps.orders.services import answers, market_create, open_orders_cancel, order_cancel_by_client_id, order_place
from apps.orders.services import commands as engine_commands
from apps.orders.services.sequencer import ENGINE_LOCK_CLASS, Sequencer
from apps.orders.store.orders import ORDER_FIELDS
from apps.orders.tests.helpers import balance
from apps.wallets.tests.conftest import backend_pids, database_url, sessions_terminate, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

D = Decimal
ORDERS = "/api/v1/orders/"


class EngineProcess(subprocess.Popen):
    """A ``run_engine`` process with its log file and its PostgreSQL application name."""

    log_path: Path
    app_name: str


@pytest.fixture
def sequencer_mode(settings):
    settings.ORDERS_ENGINE = "sequencer"
    settings.ORDERS_ENGINE_WAIT_SECONDS = 20
    yield settings
    engine_commands.queue_connection_close()
    answers.listener_close()


@pytest.fixture
def engines(tmp_path, sequencer_mode):
    """``start(*symbols)`` -> a running ``run_engine`` process (waited for until ready or blocked on its lock);
    ``start()`` with no symbol runs ``run_engine --all``."""
    started: list[EngineProcess] = []

    def start(*symbols: str, wait_ready: bool = True, environ: dict[str, str] | None = None) -> EngineProcess:
        name = f"engine-test-{os.getpid()}-{len(started)}"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "exchange.settings.test",
            "PGAPPNAME": name,
            "DATABASE_URL": database_url(connection.settings_dict),
            **(environ or {}),
        }
        log_path = tmp_path / f"{name}.log"
        args = [sys.executable, "manage.py", "run_engine", *([f"--market={s}" for s in symbols] or ["--all"])]
        with open(log_path, "wb") as log:
            process = EngineProcess(
                args,
                cwd=django_settings.BASE_DIR,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process.log_path, process.app_name = log_path, name
        started.append(process)
        if wait_ready:
            wait_for(
                lambda: process.poll() is not None or b"engine ready" in log_path.read_bytes(),
                message=f"{name} ready",
            )
            assert process.poll() is None, log_path.read_text()
        return process

    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        _sessions_end(process.app_name)
        print(f"--- {process.app_name}\n{process.log_path.read_text()}")  # shown when the test fails


def _sessions_end(app_name: str) -> None:
    """End the PostgreSQL sessions a killed engine left and wait until they are gone. A killed client's session runs
    its statement to the end before it notices; meanwhile the test database's flush (TRUNCATE of every table) could
    deadlock with it (CI, once: the flush was the one aborted, and the next test found the last one's rows)."""
    sessions_terminate(app_name)
    wait_for(lambda: not backend_pids("application_name = %s", [app_name]), message=f"{app_name}'s sessions ended")


def kill(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def waiting_on_lock(app_name: str) -> bool:
    return bool(backend_pids("application_name = %s AND wait_event_type = 'Lock'", [app_name]))


@pytest.fixture
def traders(btc_usdt, btc, usdt):
    buyer, seller = UserFactory(), UserFactory()
    fund(buyer, usdt, "100000")
    fund(seller, btc, "10")
    return buyer, seller


def test_an_order_placed_through_the_api_is_answered_by_the_sequencer(engines, traders, api_as, usdt):
    buyer, seller = traders
    engines("BTC-USDT")
    ask = order_place(user_id=seller.id, market="BTC-USDT", side="sell", price="50000", qty="0.1")
    response = api_as(buyer, "trade").post(
        ORDERS,
        {"market": "BTC-USDT", "side": "buy", "type": "limit", "price": "50100", "qty": "0.1"},
        format="json",
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["status"], body["filled_qty"]) == ("filled", "0.10000000")
    assert balance(buyer, usdt) == (D("95000"), D("0"))  # price improvement released
    assert Order.objects.get(id=ask.id).status == OrderStatus.FILLED
    assert set(Command.objects.values_list("status", flat=True)) == {CommandStatus.DONE}

    refused = api_as(buyer, "trade").post(
        ORDERS, {"market": "BTC-USDT", "side": "buy", "type": "limit", "price": "50000", "qty": "100"}, format="json"
    )
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "insufficient_funds")
    assert reconcile().ok


def test_a_command_is_applied_when_its_caller_rings_not_at_the_idle_timeout(engines, traders):
    """This sequencer reads an idle queue only every 600 s: the placement is answered within the caller's 20 s
    because the caller rang it once its command was committed (:mod:`apps.core.doorbell`)."""
    buyer, _ = traders
    engines("BTC-USDT", environ={"ORDERS_ENGINE_IDLE_SECONDS": "600"})
    time.sleep(0.5)  # its first read of the queue is done: it waits now

    order = order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1")

    assert order.status == OrderStatus.OPEN
    assert Command.objects.get().status == CommandStatus.DONE


def _columns(order: Order) -> list[tuple[str, type, str]]:
    return [(name, type(value), str(value)) for name in ORDER_FIELDS for value in [getattr(order, name)]]


def test_the_order_a_caller_gets_from_the_done_notification_is_the_row_as_read(engines, traders):
    """The caller answers from the order's row in the done notification (no read of its own): every column has
    the value, the type and the scale a read of the row gives, for a resting order, a taker that filled it (its
    maker changed in the same batch) and a cancel."""
    buyer, seller = traders
    engines("BTC-USDT")
    resting = order_place(user_id=seller.id, market="BTC-USDT", side="sell", price="50000", qty="0.3")
    taker = order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="50100", qty="0.1")
    cancelled = engine_commands.order_cancel(order_id=resting.id, user_id=seller.id)

    assert (resting.status, taker.status, cancelled.status) == ("open", "filled", "cancelled")
    assert _columns(taker) == _columns(Order.objects.get(id=taker.id))
    assert _columns(cancelled) == _columns(Order.objects.get(id=resting.id))
    assert resting.filled_qty == 0 and cancelled.filled_qty == D("0.1")
    assert resting.created_at == cancelled.created_at and resting.created_at.tzinfo is not None


@pytest.mark.parametrize("planned", [True, False], ids=["planned", "per command"])
def test_a_placement_is_answered_as_it_was_placed_not_as_a_later_command_of_its_batch_left_it(
    sequencer_mode, traders, btc_usdt, planned
):
    """Break-it review: a resting sell filled by a buy of the same batch was answered ``FILLED`` with no fills of
    its own, and an order cancelled by a later command of its batch 201 ``cancelled``: the answer read the row as
    the batch left it. Binance answers a placement with the order as placed (``NEW``); the rest is on the streams."""
    sequencer_mode.ORDERS_ENGINE_PLANNED = planned
    buyer, seller = traders
    answered: dict[str, Order] = {}

    def call(name: str, service, **arguments) -> None:
        try:
            answered[name] = service(**arguments)
        finally:
            connections.close_all()

    calls = [
        ("ask", order_place, {"user_id": seller.id, "side": "sell", "price": "50000", "qty": "0.3"}),
        ("bid", order_place, {"user_id": buyer.id, "side": "buy", "price": "50000", "qty": "0.3"}),
        (
            "ask2",
            order_place,
            {"user_id": seller.id, "side": "sell", "price": "51000", "qty": "0.1", "client_order_id": "c"},
        ),
        ("cancel", order_cancel_by_client_id, {"user_id": seller.id, "client_order_id": "c"}),
    ]
    threads = []
    for queued, (name, service, arguments) in enumerate(calls, start=1):  # queued one after the other, in order
        threads.append(threading.Thread(target=call, args=(name, service), kwargs={"market": "BTC-USDT", **arguments}))
        threads[-1].start()
        wait_for(lambda n=queued: Command.objects.filter(status=CommandStatus.PENDING).count() == n, message="queued")
    sequencer = Sequencer([btc_usdt.id])
    sequencer.acquire()
    try:
        assert sequencer.run_once() == 4  # one batch
        for thread in threads:
            thread.join(timeout=30)
    finally:
        answers.publisher_stop()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")
        sequencer.doorbell.close()

    ask, bid, ask2, cancel = (answered[name] for name, _, _ in calls)
    assert (ask.status, ask.filled_qty, ask.held_remaining) == (OrderStatus.OPEN, 0, D("0.3"))
    assert (bid.status, bid.filled_qty) == (OrderStatus.FILLED, D("0.3"))
    assert (ask2.status, ask2.reject_reason, ask2.held_remaining) == (OrderStatus.OPEN, "", D("0.1"))
    assert (cancel.id, cancel.status, cancel.held_remaining) == (ask2.id, OrderStatus.CANCELLED, 0)
    stored = {order.id: (order.status, order.filled_qty) for order in Order.objects.all()}
    assert stored == {
        ask.id: (OrderStatus.FILLED, D("0.3")),
        bid.id: (OrderStatus.FILLED, D("0.3")),
        ask2.id: (OrderStatus.CANCELLED, 0),
    }
    assert ask.filled_qty == ask.filled_qty.quantize(D("1E-18")) and ask.filled_qty.as_tuple().exponent == -18


NO_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def test_a_caller_whose_answer_is_never_published_reads_it_from_the_database(engines, traders):
    """A sequencer that cannot publish (Redis unreachable from its publisher thread: as if killed between its
    commit and the publish) still answers: the caller reads the committed outcome at its next poll, never a guess;
    the failed publish neither stops the sequencer nor its publisher (the next order is answered the same way)."""
    buyer, seller = traders
    engine = engines("BTC-USDT", environ={"REDIS_URL": NO_REDIS})
    started = time.monotonic()
    ask = order_place(user_id=seller.id, market="BTC-USDT", side="sell", price="50000", qty="0.1")
    waited = time.monotonic() - started
    wait_for(lambda: b"engine.outcomes_publish_failed" in engine.log_path.read_bytes(), message="the failure logged")
    bid = order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="50000", qty="0.1")

    assert (ask.status, ask.qty) == (OrderStatus.OPEN, D("0.1"))
    assert answers.POLL_SECONDS * 0.9 < waited < django_settings.ORDERS_ENGINE_WAIT_SECONDS
    assert bid.status == OrderStatus.FILLED
    assert Order.objects.get(id=ask.id).status == OrderStatus.FILLED
    assert engine.poll() is None


def test_a_caller_that_cannot_reach_redis_is_answered_from_the_database(engines, traders, settings, monkeypatch):
    buyer, seller = traders
    engines("BTC-USDT")
    answers.listener_close()
    monkeypatch.setattr(answers, "_client", None)  # the next client is made from the setting below
    settings.REDIS_URL = NO_REDIS
    try:
        ask = order_place(user_id=seller.id, market="BTC-USDT", side="sell", price="50000", qty="0.1")
        bid = order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="50000", qty="0.1")
    finally:
        answers.listener_close()
    assert (ask.status, bid.status) == (OrderStatus.OPEN, OrderStatus.FILLED)
    assert Order.objects.get(id=ask.id).status == OrderStatus.FILLED


def test_a_sequencer_killed_mid_batch_loses_nothing_and_applies_nothing_twice(engines, traders, usdt, btc):
    buyer, seller = traders
    first = engines("BTC-USDT")
    from apps.ledger.models import Account, AccountKind

    seller_btc = Account.objects.get(owner=seller, asset=btc, kind=AccountKind.USER_AVAILABLE)
    blocker = connections.create_connection("default")
    results: list[object] = []

    def place(n: int) -> None:
        try:
            results.append(
                order_place(
                    user_id=seller.id,
                    market="BTC-USDT",
                    side="sell",
                    price=f"{50000 + n}",
                    qty="0.1",
                    client_order_id=f"ask-{n}",
                )
            )
        except Exception as exc:  # collected for the asserts
            results.append(exc)
        finally:
            engine_commands.queue_connection_close()
            connections.close_all()

    try:
        blocker.ensure_connection()
        with blocker.cursor() as cursor:  # hold the seller's account: the batch blocks inside its transaction
            cursor.execute("BEGIN")
            cursor.execute("SELECT id FROM ledger_account WHERE id = %s FOR UPDATE", [seller_btc.id])
            callers = [threading.Thread(target=place, args=(n,)) for n in range(5)]
            for caller in callers:
                caller.start()
            wait_for(lambda: waiting_on_lock(first.app_name), message="the batch blocked mid-transaction")
            kill(first)
            cursor.execute("ROLLBACK")
    finally:
        blocker.close()
    assert Order.objects.count() == 0  # nothing of the killed batch was committed

    engines("BTC-USDT")
    for caller in callers:
        caller.join(timeout=60)

    assert sorted(o.client_order_id for o in results) == [f"ask-{n}" for n in range(5)]
    assert Order.objects.count() == 5
    assert Command.objects.filter(status=CommandStatus.DONE).count() == 5
    assert balance(seller, btc) == (D("9.5"), D("0.5"))
    assert reconcile().ok


def test_a_standby_sequencer_takes_over_when_the_active_one_dies(engines, traders):
    buyer, seller = traders
    active = engines("BTC-USDT")
    standby = engines("BTC-USDT", wait_ready=False)
    wait_for(lambda: waiting_on_lock(standby.app_name), message="the standby waiting on the advisory lock")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND NOT granted",
            [ENGINE_LOCK_CLASS],
        )
        assert cursor.fetchone()[0] == 1

    kill(active)
    wait_for(lambda: b"engine ready" in standby.log_path.read_bytes(), message="the standby taking over")
    order = order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1")
    assert order.status == OrderStatus.OPEN


def _market(base: str) -> Market:
    return market_create(
        base=Asset.objects.create(code=base, name=base, decimals=8),
        quote=Asset.objects.get(code="USDT"),
        tick_size=D("0.01"),
        step_size=D("0.0001"),
        min_qty=D("0.0001"),
        max_qty=D("1000"),
        min_notional=D("1"),
    )


def test_a_sequencer_of_every_market_serves_a_market_created_while_it_runs(engines, traders, usdt):
    buyer, _ = traders
    engines()  # run_engine --all, started when only BTC-USDT exists
    _market("ETH")

    order = order_place(user_id=buyer.id, market="ETH-USDT", side="buy", price="3000", qty="1")

    assert order.status == OrderStatus.OPEN
    assert balance(buyer, usdt) == (D("97000"), D("3000"))
    assert list(Command.objects.values_list("status", flat=True)) == [CommandStatus.DONE]


def test_a_sequencer_keeps_its_start_up_heap_out_of_the_garbage_collectors_reach(btc_usdt):
    sequencer = Sequencer([btc_usdt.id], idle_seconds=0.01)
    frozen_when_ready = []

    def ready() -> None:
        frozen_when_ready.append(gc.get_freeze_count())
        sequencer.stop()

    gc.unfreeze()
    try:
        sequencer.run(on_ready=ready)
    finally:
        gc.unfreeze()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")

    assert frozen_when_ready[0] > 10_000  # Django and the apps at least: no full collection scans them again


def test_a_new_market_is_adopted_only_while_no_other_sequencer_holds_its_lock(traders, btc_usdt):
    sequencer = Sequencer([btc_usdt.id], every_market=True)
    sequencer.acquire()
    try:
        eth_usdt = _market("ETH")
        with psycopg.connect(database_url(connection.settings_dict), autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s, %s)", [ENGINE_LOCK_CLASS, eth_usdt.id])
            assert sequencer.markets_adopt() == []
            assert sequencer.market_ids == [btc_usdt.id]
        # The other sequencer's session ended, and its lock with it: the market is taken over.
        assert sequencer.markets_adopt() == [eth_usdt.id]
        assert sequencer.market_ids == [btc_usdt.id, eth_usdt.id]
        assert set(sequencer.books) == {btc_usdt.id, eth_usdt.id}
        assert sequencer.markets_adopt() == []
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")
        sequencer.doorbell.close()


def test_a_sequencer_of_every_market_leaves_a_market_another_holds_and_starts_at_once(traders, btc_usdt):
    """Break-it review: ``run_engine --all`` beside a ``--market`` sequencer waited for ever on that market's lock,
    holding the markets before it unserved (every order a 504)."""
    eth_usdt = _market("ETH")
    with psycopg.connect(database_url(connection.settings_dict), autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s, %s)", [ENGINE_LOCK_CLASS, btc_usdt.id])
        sequencer = Sequencer([btc_usdt.id, eth_usdt.id], every_market=True)
        try:
            sequencer.acquire()  # returns: BTC-USDT is left to the other sequencer
            assert sequencer.market_ids == [eth_usdt.id]
            other.close()  # the other sequencer ends: its market is taken over
            assert sequencer.markets_adopt() == [btc_usdt.id]
            assert sequencer.market_ids == [btc_usdt.id, eth_usdt.id]
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock_all()")
            sequencer.doorbell.close()


def test_a_sequencer_of_several_markets_serves_those_it_can_lock_and_adopts_the_others_once_free(traders, btc_usdt):
    """Break-it review: a standby of two markets whose first one's sequencer died took that market's lock, then waited
    on the second's, holding the first unserved for as long as the second's sequencer lived."""
    eth_usdt = _market("ETH")
    with psycopg.connect(database_url(connection.settings_dict), autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s, %s)", [ENGINE_LOCK_CLASS, btc_usdt.id])
        sequencer = Sequencer([btc_usdt.id, eth_usdt.id])
        try:
            sequencer.acquire()  # returns: BTC-USDT is left to the other sequencer
            assert (sequencer.market_ids, sequencer.adopting()) == ([eth_usdt.id], True)
            assert sequencer.markets_adopt() == []
            _market("SOL")  # not one of its markets: never adopted
            other_pid = other.info.backend_pid
            other.close()  # returns before the server's session has ended and let its locks go
            wait_for(
                lambda: not backend_pids("pid = %s::int", [str(other_pid)]),
                message="the other sequencer's session ended",
            )
            assert sequencer.markets_adopt() == [btc_usdt.id]
            assert (sequencer.market_ids, sequencer.adopting()) == ([btc_usdt.id, eth_usdt.id], False)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock_all()")
            sequencer.doorbell.close()


def test_a_retry_after_a_restart_returns_the_original_order(engines, traders, api_as, usdt):
    buyer, seller = traders
    first = engines("BTC-USDT")
    original = order_place(
        user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1", client_order_id="mine-1"
    )
    client = api_as(buyer, "trade")
    body = {"market": "BTC-USDT", "side": "buy", "type": "limit", "price": "41000", "qty": "0.1"}
    keyed = client.post(ORDERS, body, format="json", HTTP_IDEMPOTENCY_KEY="retry-1")
    kill(first)
    engines("BTC-USDT")

    again = order_place(
        user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1", client_order_id="mine-1"
    )
    keyed_again = client.post(ORDERS, body, format="json", HTTP_IDEMPOTENCY_KEY="retry-1")

    assert again.id == original.id
    assert keyed.status_code == keyed_again.status_code == 201
    assert keyed_again.json()["id"] == keyed.json()["id"]
    assert Order.objects.count() == 2
    assert balance(buyer, usdt) == (D("100000") - D("4000") - D("4100"), D("8100"))


def test_a_wait_that_times_out_answers_status_unknown_and_the_order_is_placed_once_later(
    engines, traders, api_as, sequencer_mode
):
    buyer, seller = traders
    sequencer_mode.ORDERS_ENGINE_WAIT_SECONDS = 0.5
    body = {"market": "BTC-USDT", "side": "buy", "type": "limit", "price": "40000", "qty": "0.1"}
    response = api_as(buyer, "trade").post(ORDERS, {**body, "client_order_id": "late-1"}, format="json")

    assert response.status_code == 504
    assert response.json()["error"]["code"] == "order_status_unknown"
    assert not Order.objects.exists()
    # Queried as the 504 says, while still queued: status unknown again, never "no such order" (break-it review:
    # an empty list made a bot place it again under a new id, and both went live).
    queried = api_as(buyer, "read").get(ORDERS, {"client_order_id": "late-1"})
    assert queried.status_code == 504
    assert queried.json()["error"]["code"] == "order_status_unknown"
    assert queried.json()["error"]["fields"] == {"client_order_id": "Queued, not yet placed or refused."}
    assert api_as(buyer, "read").get(ORDERS, {"client_order_id": "never-sent"}).json() == []

    engines("BTC-USDT")
    wait_for(lambda: Command.objects.filter(status=CommandStatus.DONE).exists(), message="the queued command applied")
    placed = api_as(buyer, "read").get(ORDERS, {"client_order_id": "late-1"}).json()
    assert [o["client_order_id"] for o in placed] == ["late-1"]
    order = Order.objects.get(user=buyer, client_order_id="late-1")
    assert order.status == OrderStatus.OPEN
    assert not Trade.objects.exists()
    sequencer_mode.ORDERS_ENGINE_WAIT_SECONDS = 20
    again = order_place(
        user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1", client_order_id="late-1"
    )
    assert again.id == order.id
    assert Order.objects.count() == 1


def test_a_client_order_id_queued_once_is_never_queued_again_for_any_market(engines, traders, sequencer_mode):
    """Found by a break-it review: the same client order id sent to two markets served by two sequencers reached
    both batches, and the orders' unique client id failed the second batch whole (every user's commands in it
    replayed one by one, the book reloaded)."""
    buyer, _ = traders
    _market("ETH")
    sequencer_mode.ORDERS_ENGINE_WAIT_SECONDS = 0.3
    with pytest.raises(OrderStatusUnknown):  # no engine runs yet: queued
        order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1", client_order_id="x-1")

    with pytest.raises(IdempotencyConflict) as elsewhere:
        order_place(user_id=buyer.id, market="ETH-USDT", side="buy", price="3000", qty="1", client_order_id="x-1")
    with pytest.raises(OrderStatusUnknown):  # the same order again waits for the queued one's outcome
        order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1", client_order_id="x-1")

    assert elsewhere.value.fields == {"client_order_id": "Already used for another order."}
    assert Command.objects.filter(status=CommandStatus.PENDING).count() == 1
    engines("BTC-USDT")
    wait_for(lambda: not Command.objects.filter(status=CommandStatus.PENDING).exists(), message="the queue applied")
    assert list(Order.objects.values_list("client_order_id", "market__symbol")) == [("x-1", "BTC-USDT")]


def test_cancels_sent_after_timed_out_placements_cancel_them_when_the_engine_applies_the_queue(
    engines, traders, sequencer_mode
):
    buyer, _ = traders
    sequencer_mode.ORDERS_ENGINE_WAIT_SECONDS = 0.5
    with pytest.raises(OrderStatusUnknown):  # no engine runs: the placement stays queued
        order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1", client_order_id="q-1")
    with pytest.raises(OrderStatusUnknown):
        open_orders_cancel(user_id=buyer.id, market="BTC-USDT")
    with pytest.raises(OrderStatusUnknown):
        order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.2", client_order_id="q-2")
    with pytest.raises(OrderStatusUnknown):
        order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.3", client_order_id="q-3")
    with pytest.raises(OrderStatusUnknown):
        order_cancel_by_client_id(user_id=buyer.id, market="BTC-USDT", client_order_id="q-3")

    engines("BTC-USDT")
    wait_for(lambda: not Command.objects.filter(status=CommandStatus.PENDING).exists(), message="the queue applied")

    first, after = Order.objects.get(client_order_id="q-1"), Order.objects.get(client_order_id="q-2")
    assert (first.status, after.status) == (OrderStatus.CANCELLED, OrderStatus.OPEN)
    assert Order.objects.get(client_order_id="q-3").status == OrderStatus.CANCELLED
    assert Command.objects.get(kind=CommandKind.CANCEL_ALL).outcome == {"order_ids": [first.id]}
    sequencer_mode.ORDERS_ENGINE_WAIT_SECONDS = 20
    assert [o.id for o in open_orders_cancel(user_id=buyer.id, market="BTC-USDT")] == [after.id]
    assert open_orders_cancel(user_id=buyer.id, market="BTC-USDT") == []
    assert reconcile().ok


def test_a_resent_client_order_id_is_answered_from_the_database_while_the_engine_is_down(
    engines, traders, sequencer_mode
):
    buyer, _ = traders
    engine = engines("BTC-USDT")
    placed = order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1", client_order_id="r")
    kill(engine)
    sequencer_mode.ORDERS_ENGINE_WAIT_SECONDS = 0.5

    again = order_place(
        user_id=buyer.id, market="BTC-USDT", side="buy", price="40000.00", qty="0.1", client_order_id="r"
    )

    assert (again.id, again.status) == (placed.id, OrderStatus.OPEN)
    assert Command.objects.count() == 1  # nothing queued for the replay
    with pytest.raises(OrderStatusUnknown):  # another order under that id: the engine's to refuse
        order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.2", client_order_id="r")
    engines("BTC-USDT")
    wait_for(lambda: not Command.objects.filter(status=CommandStatus.PENDING).exists(), message="the queue applied")
    assert Command.objects.order_by("id").last().outcome["error"]["type"].endswith("IdempotencyConflict")
    assert Order.objects.count() == 1


def test_a_caller_whose_queue_connection_was_terminated_submits_on_a_new_one(engines, traders):
    buyer, _ = traders
    engines("BTC-USDT")
    first = order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1")
    with connection.cursor() as cursor:  # as a database restart or failover would, while the connection is idle
        cursor.execute("SELECT pg_terminate_backend(%s)", [engine_commands._local.conn.info.backend_pid])

    second = order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1")

    assert second.id != first.id
    assert Command.objects.filter(status=CommandStatus.DONE).count() == 2
    assert Order.objects.count() == 2


def test_halt_and_resume_are_commands_of_the_sequencer_applied_between_its_batches(engines, traders, btc_usdt):
    from apps.audit.models import AuditLogEntry
    from apps.orders.models import CommandKind, MarketStatus
    from apps.orders.services import market_halt, market_resume

    buyer, _ = traders
    operator = UserFactory(is_staff=True)
    engines("BTC-USDT")
    resting = order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1")

    halted = market_halt(market_id=btc_usdt.id, operator_id=operator.id, reason="incident")
    with pytest.raises(MarketHalted):
        order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1")
    resumed = market_resume(market_id=btc_usdt.id, operator_id=operator.id, reason="fixed")
    after = order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1")

    assert (halted.status, resumed.status) == (MarketStatus.HALTED, MarketStatus.ACTIVE)
    assert after.status == OrderStatus.OPEN and Order.objects.get(id=resting.id).status == OrderStatus.OPEN
    kinds = list(Command.objects.order_by("id").values_list("kind", "status"))
    assert [kind for kind, _ in kinds] == ["place", CommandKind.HALT, "place", CommandKind.RESUME, "place"]
    assert {status for _, status in kinds} == {CommandStatus.DONE}
    assert AuditLogEntry.objects.filter(action__in=["market.halt", "market.resume"]).count() == 2
    assert reconcile().ok


def test_a_late_answer_on_the_reused_reply_channel_is_not_taken_for_the_next_command(engines, traders, sequencer_mode):
    """A caller whose wait timed out keeps its thread's reply channel: the answer to that first command, published
    later, reaches the channel while the caller waits for its next command, and is dropped (its token differs)."""
    buyer, seller = traders
    channel = answers.listener().channel
    observer = answers._redis().pubsub()
    observer.subscribe(channel)
    sequencer_mode.ORDERS_ENGINE_WAIT_SECONDS = 0.5
    with pytest.raises(OrderStatusUnknown):
        order_place(user_id=seller.id, market="BTC-USDT", side="sell", price="50000", qty="0.1")
    sequencer_mode.ORDERS_ENGINE_WAIT_SECONDS = 20

    engines("BTC-USDT")
    late = wait_for(lambda: observer.get_message(timeout=1, ignore_subscribe_messages=True), message="the late answer")
    observer.close()
    second = order_place(user_id=seller.id, market="BTC-USDT", side="sell", price="50001", qty="0.2")

    first = Order.objects.get(price=D("50000"))
    assert late["data"].decode().startswith(Command.objects.get(reply_to=channel, outcome__order_id=first.id).token)
    assert (second.price, second.qty) == (D("50001"), D("0.2"))
    assert second.id != first.id
    assert answers.listener().channel == channel  # the same subscription all along


def test_two_threads_of_a_process_each_get_their_own_answers_on_their_own_channel(engines, traders):
    buyer, seller = traders
    engines("BTC-USDT")
    placed: dict[str, list] = {"sell": [], "buy": []}
    channels: dict[str, str] = {}

    def trade(side: str, user_id: int, price: str) -> None:
        try:
            channels[side] = answers.listener().channel
            for n in range(10):
                placed[side].append(
                    order_place(
                        user_id=user_id,
                        market="BTC-USDT",
                        side=side,
                        price=price,
                        qty="0.01",
                        client_order_id=f"{side}-{n}",
                    )
                )
        finally:
            engine_commands.queue_connection_close()
            answers.listener_close()
            connections.close_all()

    threads = [
        threading.Thread(target=trade, args=("sell", seller.id, "50000")),
        threading.Thread(target=trade, args=("buy", buyer.id, "40000")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert channels["sell"] != channels["buy"]
    for side, user in (("sell", seller), ("buy", buyer)):
        assert [(o.client_order_id, o.side, o.user_id) for o in placed[side]] == [
            (f"{side}-{n}", side, user.id) for n in range(10)
        ]
    assert set(Command.objects.values_list("reply_to", flat=True)) == set(channels.values())


def test_a_retry_under_the_key_of_a_command_another_thread_is_waiting_for_reads_the_outcome_from_the_database(
    engines, traders, sequencer_mode
):
    """The first command's answer goes to its own caller's channel: a retry under its Idempotency-Key from another
    thread (another channel), made while the command is pending, gets the same outcome from the database."""
    buyer, _ = traders
    outcomes: dict[str, object] = {}
    backends: dict[str, int] = {}

    def place(name: str) -> None:
        try:
            outcomes[name] = order_place(
                user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1", idempotency_key="key-1"
            )
        except Exception as exc:  # collected for the asserts
            outcomes[name] = exc
        finally:
            backends[name] = engine_commands._local.conn.info.backend_pid
            engine_commands.queue_connection_close()
            answers.listener_close()
            connections.close_all()

    sequencer_mode.ORDERS_ENGINE_WAIT_SECONDS = 0.5
    first = threading.Thread(target=place, args=("first",))
    first.start()
    first.join(timeout=60)
    sequencer_mode.ORDERS_ENGINE_WAIT_SECONDS = 20
    retry = threading.Thread(target=place, args=("retry",))
    retry.start()
    wait_for(
        lambda: backend_pids("query LIKE %s AND pid <> %s", ["SELECT status, outcome FROM%", str(backends["first"])]),
        message="the retry reading the pending command's status",
    )
    engines("BTC-USDT")
    retry.join(timeout=60)

    assert isinstance(outcomes["first"], OrderStatusUnknown)
    order = outcomes["retry"]
    assert isinstance(order, Order) and order.status == OrderStatus.OPEN
    assert Order.objects.count() == Command.objects.count() == 1


def test_a_forked_child_listens_on_a_channel_of_its_own():
    """A child forked while its parent thread holds a listener never reads the parent's subscription: it subscribes
    anew, on another channel."""
    parent = answers.listener()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its channel, then leave without running any cleanup of the parent's
        try:
            os.write(write, answers.listener().channel.encode())
        finally:
            os._exit(0)
    os.close(write)
    child_channel = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    try:
        assert child_channel.startswith("orders_reply_") and child_channel != parent.channel
        assert answers.listener() is parent
    finally:
        answers.listener_close()


def test_the_publisher_sends_every_queued_answer_before_it_stops():
    """:func:`answers.publisher_stop` (a sequencer's shutdown) returns once every answer handed to the publisher
    has been published."""
    listener = answers.listener()
    try:
        for n in range(300):
            answers._publisher().put([(listener.channel, f"token-{n}", f'{{"order_id": {n}}}')])
        answers.publisher_stop()
        for n in range(300):
            assert listener.get(f"token-{n}", timeout=10) == f'{{"order_id": {n}}}'
    finally:
        answers.listener_close()


def test_a_publisher_whose_thread_ended_is_replaced_at_the_next_answers():
    listener = answers.listener()
    try:
        ended = answers._publisher()
        ended.stop(timeout=10)  # as if its thread had died
        answers._publisher().put([(listener.channel, "token-after", '{"order_id": 1}')])

        assert not ended.thread.is_alive()
        assert listener.get("token-after", timeout=10) == '{"order_id": 1}'
    finally:
        answers.publisher_stop()
        answers.listener_close()


def test_a_sequencer_stopped_by_sigterm_answers_its_last_batch_and_exits_cleanly(engines, traders):
    buyer, seller = traders
    engine = engines("BTC-USDT")
    ask = order_place(user_id=seller.id, market="BTC-USDT", side="sell", price="50000", qty="0.1")
    engine.send_signal(signal.SIGTERM)

    assert engine.wait(timeout=30) == 0
    assert ask.status == OrderStatus.OPEN
    assert b"Traceback" not in engine.log_path.read_bytes()


def test_an_operators_cancel_through_the_sequencer_is_audited_in_the_batch_that_cancels(engines, traders, btc):
    from apps.audit.models import AuditLogEntry
    from apps.core.errors import InvalidState
    from apps.orders.models import EndReason
    from apps.orders.services import order_cancel_by_operator

    _, seller = traders
    operator = UserFactory(is_staff=True)
    engines("BTC-USDT")
    resting = order_place(user_id=seller.id, market="BTC-USDT", side="sell", price="50000", qty="0.5")

    cancelled = order_cancel_by_operator(order_id=resting.id, operator_id=operator.id, reason="fraud review")

    assert (cancelled.status, cancelled.reject_reason) == (OrderStatus.CANCELLED, EndReason.CANCELLED_BY_OPERATOR)
    assert balance(seller, btc) == (D("10"), D("0"))
    entry = AuditLogEntry.objects.get(action="order.cancel_by_operator")
    assert (entry.actor_id, entry.object_id, entry.before, entry.after) == (
        operator.id,
        str(resting.id),
        {"status": "open"},
        {"status": "cancelled", "reason": "fraud review"},
    )
    with pytest.raises(InvalidState):
        order_cancel_by_operator(order_id=resting.id, operator_id=operator.id, reason="again")
    assert AuditLogEntry.objects.filter(action="order.cancel_by_operator").count() == 1
    assert reconcile().ok


def _pending_read_plans() -> tuple[int, int]:
    """``(generic, custom)`` plans PostgreSQL made so far of this connection's prepared pending read."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) FROM pg_prepared_statements"
            " WHERE statement LIKE '%%LATERAL%%orders_command%%'"
        )
        return cursor.fetchone()


def test_a_sequencers_prepared_statements_are_planned_once_not_at_every_execution(btc_usdt):
    sequencer = Sequencer([btc_usdt.id])
    sequencer.acquire()
    try:
        generic, custom = _pending_read_plans()
        assert sequencer.run_once() == 0 and sequencer.run_once() == 0
        # PostgreSQL's default (auto) plans the first five executions afresh: these two reuse the generic plan.
        assert _pending_read_plans() == (generic + 2, custom)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")
            cursor.execute("RESET plan_cache_mode")
        sequencer.doorbell.close()


def test_an_exact_retry_queued_behind_another_request_with_its_client_order_id_gets_its_order(
    engines, traders, sequencer_mode
):
    """Found by a break-it review: a retry of the order ``g-1`` that found no order yet (its replay read came
    before the first request was applied) and then met a different request under ``g-1`` queued (the engine's to
    refuse) was told "already used for another order" (409): a bot would take its own order for failed and send it
    again under a new id. It now waits for the queued request, and the sequencer answers it with its order."""
    buyer, _ = traders
    engine = engines("BTC-USDT")
    placed = order_place(
        user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.1", client_order_id="g-1"
    )
    first = Command.objects.get()
    kill(engine)
    sequencer_mode.ORDERS_ENGINE_WAIT_SECONDS = 0.3
    with pytest.raises(OrderStatusUnknown):  # another order under g-1: queued, the engine's to refuse
        order_place(user_id=buyer.id, market="BTC-USDT", side="buy", price="40000", qty="0.2", client_order_id="g-1")
    sequencer_mode.ORDERS_ENGINE_WAIT_SECONDS = 20
    retried: list[object] = []

    def retry() -> None:  # the retry's submission, past its replay read (which found no order then)
        try:
            retried.append(
                engine_commands.command_submit(
                    market="BTC-USDT", kind=CommandKind.PLACE, user_id=buyer.id, payload=first.payload
                )
            )
        except Exception as exc:  # collected for the asserts
            retried.append(exc)
        finally:
            engine_commands.queue_connection_close()
            connections.close_all()

    caller = threading.Thread(target=retry)
    caller.start()
    time.sleep(1)  # the retry is held back by the queued request before an engine applies it
    engines("BTC-USDT")
    caller.join(timeout=60)

    assert [outcome.get("order_id") if isinstance(outcome, dict) else outcome for outcome in retried] == [placed.id]
    refused = Command.objects.exclude(id=first.id).order_by("id").first()
    assert (refused.payload["qty"], refused.outcome["error"]["type"].split(":")[1]) == ("0.2", "IdempotencyConflict")
    assert Order.objects.count() == 1


def test_health_names_the_markets_no_sequencer_serves_and_is_ok_once_every_one_is(engines, client, btc_usdt):
    eth_usdt = _market("ETH")
    assert engine_health() == "no sequencer for BTC-USDT, ETH-USDT"
    engines("BTC-USDT")
    response = client.get("/healthz")
    assert (response.status_code, response.json()["engine"]) == (503, "no sequencer for ETH-USDT")
    Market.objects.filter(id=eth_usdt.id).update(status="halted")  # its cancels still need a sequencer
    assert engine_health() == "no sequencer for ETH-USDT"
    engines("ETH-USDT")
    assert engine_health() == "ok"


def test_health_reports_commands_waiting_on_a_sequencer_that_holds_its_lock_but_applies_nothing(
    sequencer_mode, btc_usdt
):
    """A hung sequencer (its session alive, the market's lock held, nothing applied): the oldest pending command
    tells, once it has waited longer than a caller does (``ORDERS_ENGINE_WAIT_SECONDS``, 20 here)."""
    user = UserFactory()
    with psycopg.connect(database_url(connection.settings_dict), autocommit=True) as hung:
        hung.execute("SELECT pg_advisory_lock(%s, %s)", [ENGINE_LOCK_CLASS, btc_usdt.id])
        assert engine_health() == "ok"
        command = Command.objects.create(
            market=btc_usdt,
            kind=CommandKind.CANCEL_ALL,
            user=user,
            request_hash="0" * 64,
            token="hung",
            payload={"user_id": user.id},
            created_at=timezone.now() - timedelta(seconds=15),
        )
        assert engine_health() == "ok"  # its caller still waits
        Command.objects.filter(id=command.id).update(created_at=timezone.now() - timedelta(seconds=75))
        assert engine_health() == "commands waiting 75 s"


def test_health_leaves_the_engine_out_when_orders_are_matched_inline(client, settings, btc_usdt):
    settings.ORDERS_ENGINE = "inline"
    assert engine_health() is None
    assert "engine" not in client.get("/healthz").json()
