"""The inbox applied in batches: one transaction per batch, every event exactly once, a bad one on its own."""

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
import redis
from celery import current_app
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.ledger import services as ledger_services
from apps.ledger.models import AccountKind, JournalEntry
from apps.ledger.services import system_account, user_accounts
from apps.ledger.tests.factories import UserFactory, fund
from apps.wallets import queueing
from apps.wallets import services as wallet_services
from apps.wallets.custody.simnet import new_address
from apps.wallets.custody.simulator.provider import CALLBACK_DELIVER_TASK
from apps.wallets.models import CustodyEvent, Deposit, DepositStatus, EventState, WithdrawalStatus
from apps.wallets.services import (
    custody_event_process,
    custody_event_receive,
    custody_events_process_batch,
    custody_events_requeue,
    deposit_address_get_or_create,
    withdrawal_request,
)

from .factories import book_address, deposit_payload, deposit_through_custody, signed


def receive(payload: dict) -> CustodyEvent:
    return custody_event_receive(body=signed(payload)[0])[0]


def available(user, asset) -> Decimal:
    return user_accounts(user.id, asset)[0].balance


@pytest.fixture
def users(btc):
    return [UserFactory() for _ in range(5)]


@pytest.fixture
def addresses(btc, users) -> list[str]:
    return [deposit_address_get_or_create(user_id=user.id, asset=btc).address for user in users]


@pytest.fixture
def posting_calls(monkeypatch) -> list[int]:
    """The number of entries in each call the wallets make to the ledger's ``entries_post`` (a spy that calls
    the real function)."""
    calls: list[int] = []
    real = ledger_services.entries_post

    def spy(entries):
        calls.append(len(entries))
        return real(entries)

    monkeypatch.setattr(wallet_services, "entries_post", spy)
    return calls


def test_a_batch_credits_every_deposit_once_with_one_posting_call(btc, users, addresses, posting_calls):
    events = [receive(deposit_payload(addresses[n % 5], "0.1", txid=f"b-{n}")) for n in range(20)]

    batch = custody_events_process_batch(limit=100)

    assert sorted(batch.processed) == sorted(event.pk for event in events)
    assert (batch.rejected, batch.deferred, batch.claimed, batch.applied) == ((), (), 20, 20)
    assert posting_calls == [20]
    assert Deposit.objects.filter(status=DepositStatus.CREDITED).count() == 20
    assert not Deposit.objects.filter(entry__isnull=True).exists()
    assert [available(user, btc) for user in users] == [Decimal("0.4")] * 5
    assert system_account(AccountKind.CUSTODY, btc).balance == Decimal(2)
    assert JournalEntry.objects.filter(idempotency_key__startswith="deposit:simnet:b-").count() == 20
    assert not CustodyEvent.objects.filter(state=EventState.RECEIVED).exists()
    assert custody_events_process_batch(limit=100).claimed == 0  # nothing is applied twice


def test_a_batch_reads_the_same_number_of_rows_whatever_its_size(btc, users, addresses):
    # Each credited deposit used to read its asset again (one query per deposit). The stream's row and the
    # e-mail's recipient, per deposit by design (apps.streams, apps.accounts), are left out of the count.
    def queries_of_a_batch(prefix: str, size: int) -> int:
        for n in range(size):
            receive(deposit_payload(addresses[n % 5], "0.1", txid=f"{prefix}-{n}"))
        with CaptureQueriesContext(connection) as captured:
            assert custody_events_process_batch(limit=100).applied == size
        per_deposit = ("streams_", '"auth_user"')
        return len([query for query in captured.captured_queries if not any(t in query["sql"] for t in per_deposit)])

    queries_of_a_batch("first", 5)  # the users' first coins: their accounts are created
    assert queries_of_a_batch("small", 5) == queries_of_a_batch("large", 15)


def test_a_batch_takes_at_most_its_limit_oldest_first_and_skips_the_excluded(btc, addresses):
    events = [receive(deposit_payload(addresses[0], "1", txid=f"l-{n}")) for n in range(5)]

    batch = custody_events_process_batch(limit=2, exclude=[events[0].pk])

    assert batch.processed == (events[1].pk, events[2].pk)
    assert CustodyEvent.objects.get(pk=events[0].pk).state == EventState.RECEIVED


def test_an_unknown_address_in_a_batch_is_rejected_on_its_own(btc, users, addresses, posting_calls):
    good = [receive(deposit_payload(addresses[n], "1", txid=f"g-{n}")) for n in range(3)]
    bad = receive(deposit_payload(new_address(), "1", txid="unknown"))

    batch = custody_events_process_batch(limit=100)

    assert batch.rejected == (bad.pk,)
    assert sorted(batch.processed) == sorted(event.pk for event in good)
    assert posting_calls == [3]
    bad.refresh_from_db()
    assert bad.state == EventState.REJECTED and "is not one of our deposit addresses" in bad.error
    assert [available(user, btc) for user in users[:3]] == [Decimal(1)] * 3
    assert not Deposit.objects.filter(txid="unknown").exists()


def test_a_credit_the_ledger_refuses_fails_alone_and_the_rest_of_the_batch_is_credited(btc, users, addresses):
    fund(users[0], btc, "99999999999000000000")  # one more large deposit would take it to 10^20
    big = receive(deposit_payload(addresses[0], "99999999999.99999999", txid="too-big"))
    others = [receive(deposit_payload(addresses[n], "0.5", txid=f"ok-{n}")) for n in range(1, 5)]

    batch = custody_events_process_batch(limit=100)

    assert batch.rejected == (big.pk,)
    assert sorted(batch.processed) == sorted(event.pk for event in others)
    assert "10^20" in CustodyEvent.objects.get(pk=big.pk).error
    assert not Deposit.objects.filter(txid="too-big").exists()  # nothing of it applied
    assert [available(user, btc) for user in users[1:]] == [Decimal("0.5")] * 4


# (confirmations, status, amount) reports of one output, in the order they arrive.
REPORTS = [
    (0, "pending", "1"),
    (1, "pending", "1"),
    (1, "pending", "2"),  # contradicts the amount recorded
    (None, "confirmed", "1"),  # final without a count: credited
    (5, "confirmed", "1"),  # more confirmations of a credited deposit are recorded
    (None, "failed", "1"),  # failed after the credit: for an operator
]


def scenario(prefix: str, address: str) -> list[CustodyEvent]:
    """Reports of three outputs: one through ``REPORTS``, one failed then confirmed, one pending only."""
    events = []
    for n, (confirmations, status, amount) in enumerate(REPORTS):
        payload = deposit_payload(
            address, amount, txid=f"{prefix}-a", confirmations=confirmations, status=status, event_id=f"{prefix}-a{n}"
        )
        events.append(receive(payload))
    for n, status in enumerate(["failed", "confirmed"]):
        events.append(
            receive(deposit_payload(address, "3", txid=f"{prefix}-b", status=status, event_id=f"{prefix}-b{n}"))
        )
    events.append(receive(deposit_payload(address, "4", txid=f"{prefix}-c", confirmations=0, status="pending")))
    return events


def outcome(prefix: str, events: list[CustodyEvent]) -> tuple:
    """The events' states and errors (their own address and deposit ids left out) and the deposits they left."""
    states = []
    for event in events:
        event.refresh_from_db()
        states.append((event.state, event.error.replace(event.address, "<address>").split("#")[0]))
    deposits = [
        (deposit.txid.removeprefix(f"{prefix}-"), deposit.status, deposit.confirmations, deposit.amount)
        for deposit in Deposit.objects.filter(txid__startswith=f"{prefix}-").order_by("txid")
    ]
    return states, deposits


def test_a_batch_gives_each_report_the_outcome_it_gets_when_applied_alone(btc, users, addresses):
    """The same reports applied one by one (one user) and as one batch (another user) end the same way."""
    type(btc).objects.filter(pk=btc.pk).update(confirmations_required=3)
    alone = scenario("alone", addresses[0])
    for event in alone:
        custody_event_process(event_pk=event.pk)
    batched = scenario("batch", addresses[1])

    batch = custody_events_process_batch(limit=100)

    assert batch.claimed == len(batched)
    assert outcome("batch", batched) == outcome("alone", alone)
    assert [state for state, _error in outcome("batch", batched)[0]].count(EventState.REJECTED) == 3
    assert outcome("batch", batched)[1] == [
        ("a", DepositStatus.CREDITED, 5, Decimal(1)),
        ("b", DepositStatus.FAILED, 0, Decimal(3)),
        ("c", DepositStatus.PENDING, 0, Decimal(4)),
    ]
    assert available(users[0], btc) == available(users[1], btc) == Decimal(1)


def test_a_withdrawal_outcome_not_ready_is_deferred_and_the_rest_of_the_batch_applied(usdt, user):
    deposit_through_custody(user, usdt, "100")
    book_address(user, usdt, destination := new_address())
    withdrawal = withdrawal_request(user_id=user.id, asset_code="USDT", amount="30", address=destination)
    assert withdrawal.status == WithdrawalStatus.APPROVED  # not yet recorded as submitted
    early = receive(
        {
            "event_id": "early",
            "type": "withdrawal",
            "withdrawal_id": withdrawal.pk,
            "asset": "USDT",
            "amount": "30",
            "txid": "t-early",
            "status": "completed",
        }
    )
    address = deposit_address_get_or_create(user_id=user.id, asset=usdt).address
    deposit = receive(deposit_payload(address, "5", asset="USDT", txid="beside"))

    batch = custody_events_process_batch(limit=100)

    assert (batch.deferred, batch.processed) == ((early.pk,), (deposit.pk,))
    assert CustodyEvent.objects.get(pk=early.pk).state == EventState.RECEIVED
    assert available(user, usdt) == Decimal(75)  # 100 - 30 held + 5


def test_a_batch_posting_in_several_calls_locks_every_account_first_in_id_order(usdt, monkeypatch):
    """Deposits and a withdrawal completion in one batch post in several calls: the accounts of all of them are
    locked in one ordered statement before the first, so the batch cannot deadlock with a sequencer's, which takes
    its accounts at once (found by a fresh user: the engine's batch was the deadlock's victim)."""
    withdrawer, depositor = UserFactory(), UserFactory()
    deposit_through_custody(withdrawer, usdt, "100")
    book_address(withdrawer, usdt, destination := new_address())
    withdrawal = withdrawal_request(user_id=withdrawer.id, asset_code="USDT", amount="30", address=destination)
    wallet_services.withdrawal_submit(withdrawal_id=withdrawal.pk)
    completion = {"type": "withdrawal", "withdrawal_id": withdrawal.pk, "asset": "USDT", "amount": "30"}
    receive({**completion, "event_id": "done", "txid": "t-done", "status": "completed"})
    address = deposit_address_get_or_create(user_id=depositor.id, asset=usdt).address
    receive(deposit_payload(address, "5", asset="USDT", txid="beside"))
    calls: list[tuple[str, set[int]]] = []
    real_lock, real_post, real_posts = (
        ledger_services.accounts_lock,
        ledger_services.entry_post,
        ledger_services.entries_post,
    )

    def lock(ids):
        calls.append(("lock", set(ids)))
        return real_lock(ids)

    def post(**entry):
        calls.append(("post", {leg.account_id for leg in entry["legs"]}))
        return real_post(**entry)

    def posts(entries):
        calls.append(("post", {leg.account_id for entry in entries for leg in entry.legs}))
        return real_posts(entries)

    monkeypatch.setattr(wallet_services, "accounts_lock", lock)
    monkeypatch.setattr(wallet_services, "entry_post", post)
    monkeypatch.setattr(wallet_services, "entries_post", posts)

    batch = custody_events_process_batch(limit=100)

    assert len(batch.processed) == 2
    assert WithdrawalStatus.COMPLETED == wallet_services.Withdrawal.objects.get(pk=withdrawal.pk).status
    (kind, locked), *postings = calls
    assert kind == "lock" and [kind for kind, _ in postings] == ["post", "post"]
    assert all(accounts <= locked for _, accounts in postings)


@pytest.mark.django_db(transaction=True)
def test_events_another_worker_is_applying_are_skipped_not_waited_for(btc, users, addresses):
    """A second worker takes the events the first has not locked: the two split the inbox instead of queueing."""
    events = [receive(deposit_payload(addresses[n % 5], "1", txid=f"s-{n}")) for n in range(10)]
    held = events[:4]
    locked, release = threading.Event(), threading.Event()

    def other_worker():  # holds its batch's rows as a worker in the middle of its transaction does
        try:
            with transaction.atomic():
                list(
                    CustodyEvent.objects.select_for_update(of=("self",), no_key=True).filter(
                        pk__in=[event.pk for event in held]
                    )
                )
                locked.set()
                release.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=other_worker)
    thread.start()
    try:
        assert locked.wait(30)
        batch = custody_events_process_batch(limit=100)
    finally:
        release.set()
        thread.join()

    assert sorted(batch.processed) == sorted(event.pk for event in events[4:])
    assert CustodyEvent.objects.filter(state=EventState.RECEIVED).count() == 4
    assert sorted(custody_events_process_batch(limit=100).processed) == sorted(event.pk for event in held)


def test_the_sweep_finds_old_unprocessed_events_and_queues_one_drain(
    btc, addresses, django_capture_on_commit_callbacks
):
    old, recent = (receive(deposit_payload(addresses[0], "1", txid=txid)) for txid in ("old", "recent"))
    CustodyEvent.objects.filter(pk=old.pk).update(received_at=timezone.now() - timedelta(seconds=10))

    with django_capture_on_commit_callbacks() as queued:
        assert custody_events_requeue(older_than=timedelta(seconds=5)) == [old.pk]
    assert len(queued) == 1  # one drain for all of them, not a task per event
    assert CustodyEvent.objects.get(pk=old.pk).requeued_at is not None
    custody_event_process(event_pk=old.pk)
    with django_capture_on_commit_callbacks() as queued:
        assert custody_events_requeue(older_than=timedelta(seconds=5)) == []
    assert queued == []
    assert CustodyEvent.objects.get(pk=recent.pk).state == EventState.RECEIVED


def test_a_stored_event_wakes_one_drain_until_a_drain_finds_the_inbox_empty(settings):
    """The drains really go to the session's queue in Redis (a worker test later finds them and drains nothing)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    queueing.inbox_drain_done()
    before = client.llen(queue)
    try:
        assert queueing.inbox_drain_wake() is True
        assert queueing.inbox_drain_wake() is False  # one is queued or running: it will see the event
        queueing.inbox_drain_done()
        assert queueing.inbox_drain_wake() is True
        assert client.llen(queue) - before == 2
    finally:
        queueing.inbox_drain_done()
        client.close()


def test_the_tasks_queued_by_name_are_registered():
    import apps.wallets.custody.simulator.tasks  # noqa: F401 (registers its task)
    import apps.wallets.tasks  # noqa: F401 (registers its tasks)

    for name in (*queueing.TASK_NAMES, CALLBACK_DELIVER_TASK):
        assert name in current_app.tasks, name


def test_a_deposit_reported_twice_in_one_batch_is_credited_and_announced_once(
    btc, users, addresses, posting_calls, monkeypatch
):
    """Two confirmed reports of one output in the same batch: one credit and one 'Deposit credited' e-mail (the
    second report used to add the deposit to the batch's credits again: the ledger took it as a replay, the
    owner got the e-mail twice)."""
    users[0].email = "twice@example.com"
    users[0].save(update_fields=["email"])
    receive(deposit_payload(addresses[0], "0.1", txid="twice", confirmations=1))
    receive(deposit_payload(addresses[0], "0.1", txid="twice", confirmations=2))

    mails: list[tuple[int, str]] = []  # (user id, template) of each e-mail queued (a spy calling the real function)
    email = wallet_services.email_user_on_commit

    def spy(*, user_id, template, context):
        mails.append((user_id, template))
        return email(user_id=user_id, template=template, context=context)

    monkeypatch.setattr(wallet_services, "email_user_on_commit", spy)

    batch = custody_events_process_batch(limit=100)

    assert batch.applied == 2
    assert posting_calls == [1]
    assert mails == [(users[0].id, "deposit_credited")]
    assert JournalEntry.objects.filter(idempotency_key="deposit:simnet:twice:0").count() == 1
    assert Deposit.objects.get(txid="twice").confirmations == 2
    assert available(users[0], btc) == Decimal("0.1")
