"""End to end through a real Celery worker process, real HTTP to the webhook, and the simulated custody."""

import signal
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
import requests
from django.core.management import call_command
from django.db import OperationalError, connection, transaction

from apps.ledger.amounts import format_amount
from apps.ledger.models import Account, AccountKind, JournalEntry
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import system_account, user_accounts
from apps.ledger.tests.factories import UserFactory
from apps.wallets.custody.simnet import new_address
from apps.wallets.custody.simulator.models import SimCallback, SimWallet, SimWithdrawal
from apps.wallets.custody.simulator.provider import SimulatedCustody
from apps.wallets.models import CustodyEvent, Deposit, DepositStatus, EventState, Withdrawal, WithdrawalStatus
from apps.wallets.services import (
    custody_events_requeue,
    deposit_address_get_or_create,
    withdrawal_approve,
    withdrawal_request,
)
from exchange.tests.concurrency import run_concurrently

from .conftest import backend_pids, make_operator, wait_for
from .factories import book_address, deposit_payload, deposit_through_custody, signed

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def post(url: str, payload: dict) -> int:
    body, headers = signed(payload)
    return requests.post(url, data=body, headers=headers, timeout=30).status_code


def available(user, asset) -> Decimal:
    return user_accounts(user.id, asset)[0].balance


def held(user, asset) -> Decimal:
    return user_accounts(user.id, asset)[1].balance


def credited(txid: str, vout: int = 0):
    return Deposit.objects.filter(txid=txid, vout=vout, status=DepositStatus.CREDITED).first()


def all_events_processed() -> bool:
    return not CustodyEvent.objects.filter(state=EventState.RECEIVED).exists()


def test_s5_same_deposit_callback_three_times_two_concurrently_credits_once(worker, callback_url, btc, user):
    """SCENARIOS.md S5: txid X, vout 0, 1 BTC, confirmed, sent three times (two at once): every answer 200, 1 BTC."""
    address = deposit_address_get_or_create(user_id=user.id, asset=btc).address
    payload = deposit_payload(address, "1", txid="X", vout=0, confirmations=1, status="confirmed")

    statuses = run_concurrently(lambda: post(callback_url, payload), lambda: post(callback_url, payload))
    statuses.append(post(callback_url, payload))

    assert statuses == [200, 200, 200]
    wait_for(lambda: credited("X"), message="the deposit to be credited")
    wait_for(all_events_processed, message="the inbox to drain")
    assert available(user, btc) == Decimal("1")
    assert JournalEntry.objects.filter(idempotency_key="deposit:simnet:X:0").count() == 1
    assert CustodyEvent.objects.count() == 1


def test_one_output_callback_under_three_event_ids_credits_once(worker, callback_url, btc, user):
    """The deposit is unique on (network, txid, vout): reports of it under other event ids credit nothing more."""
    address = deposit_address_get_or_create(user_id=user.id, asset=btc).address
    payloads = [
        deposit_payload(address, "0.5", txid="Y", confirmations=count, status=status, event_id=f"y-{count}")
        for count, status in [(1, "pending"), (2, "pending"), (3, "confirmed")]
    ]

    statuses = run_concurrently(*[lambda payload=payload: post(callback_url, payload) for payload in payloads])

    assert statuses == [200, 200, 200]
    wait_for(all_events_processed, message="the inbox to drain")
    deposit = credited("Y")
    assert deposit is not None and deposit.confirmations == 3
    assert available(user, btc) == Decimal("0.5")
    assert JournalEntry.objects.filter(idempotency_key="deposit:simnet:Y:0").count() == 1


def test_two_outputs_of_one_transaction_to_two_users_are_both_credited_once(worker, callback_url, btc):
    first, second = UserFactory(), UserFactory()
    custody = SimulatedCustody()
    for user, vout, amount in [(first, 0, "0.5"), (second, 1, "0.25")]:
        address = deposit_address_get_or_create(user_id=user.id, asset=btc).address
        custody.deposit_receive(address=address, amount=Decimal(amount), txid="T", vout=vout)

    deliveries = custody.callbacks_deliver_due()  # real HTTP to the live server
    # the provider sends each callback again, as after a lost answer
    for event_id in [delivery.event_id for delivery in deliveries]:
        callback = SimCallback.objects.get(event_id=event_id)
        assert post(callback_url, {"event_id": event_id, **callback.payload}) == 200

    assert [delivery.status for delivery in deliveries] == [200] * 6  # 0, 1, 2 confirmations per output
    wait_for(lambda: credited("T", 0) and credited("T", 1), message="both outputs to be credited")
    wait_for(all_events_processed, message="the inbox to drain")
    assert (available(first, btc), available(second, btc)) == (Decimal("0.5"), Decimal("0.25"))
    assert JournalEntry.objects.filter(idempotency_key="deposit:simnet:T:0").count() == 1
    assert JournalEntry.objects.filter(idempotency_key="deposit:simnet:T:1").count() == 1
    assert reconcile().ok


def test_s6_deposits_of_0_1_and_0_2_then_a_withdrawal_of_0_3_leave_exactly_zero(worker, callback_url, btc, user):
    """SCENARIOS.md S6, through ``simulate_deposit``, the webhook, the worker and the simulated custody."""
    maker = UserFactory()
    deposit_through_custody(maker, btc, "1")  # the exchange's other coins pay custody's network fee
    out = StringIO()
    call_command("simulate_deposit", user=user.username, asset="BTC", amount="0.1", txid="s6-a", stdout=out)
    call_command("simulate_deposit", user=user.username, asset="BTC", amount="0.2", txid="s6-b", stdout=out)
    assert out.getvalue().count("HTTP 200") == 6
    wait_for(lambda: credited("s6-a") and credited("s6-b"), message="both deposits to be credited")
    assert available(user, btc) == Decimal("0.3")

    address = book_address(user, btc, new_address()).address
    withdrawal = withdrawal_request(user_id=user.id, asset_code="BTC", amount="0.3", address=address)

    wait_for(
        lambda: Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.COMPLETED,
        message="the withdrawal to complete",
    )
    balance = available(user, btc)
    assert balance == 0 and balance.is_zero()
    assert format_amount(balance, btc.decimals) == "0.00000000"
    assert held(user, btc) == 0
    wait_for(all_events_processed, message="the inbox to drain")
    assert system_account(AccountKind.CUSTODY, btc).balance == Decimal("0.99999")  # 1.3 - 0.3 - network fee
    assert SimWallet.objects.get(asset_code="BTC").balance == Decimal("0.99999")
    assert reconcile().ok


def test_two_operators_approving_at_once_give_one_submission_and_one_debit(worker, usdt, user):
    deposit_through_custody(user, usdt, "100")
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=Decimal(10))
    address = book_address(user, usdt, new_address()).address
    withdrawal = withdrawal_request(user_id=user.id, asset_code="USDT", amount="60", address=address)
    assert withdrawal.status == WithdrawalStatus.AWAITING_APPROVAL
    first, second = make_operator(), make_operator()

    results = run_concurrently(
        lambda: withdrawal_approve(withdrawal_id=withdrawal.pk, operator_id=first.id),
        lambda: withdrawal_approve(withdrawal_id=withdrawal.pk, operator_id=second.id),
    )

    assert sorted(type(result).__name__ for result in results) == ["InvalidState", "Withdrawal"]
    wait_for(
        lambda: Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.COMPLETED,
        message="the withdrawal to complete",
    )
    at_custody = SimWithdrawal.objects.get()
    assert (at_custody.client_reference, at_custody.requests) == (str(withdrawal.pk), 1)
    assert JournalEntry.objects.filter(idempotency_key=f"withdrawal:{withdrawal.pk}:complete").count() == 1
    assert (available(user, usdt), held(user, usdt)) == (Decimal(40), Decimal(0))
    assert system_account(AccountKind.CUSTODY, usdt).balance == Decimal("39.5")  # 100 - 60 - network fee 0.5
    wait_for(all_events_processed, message="the inbox to drain")
    assert reconcile().ok


def test_custody_timeout_then_success_on_retry_sends_once_and_keeps_the_hold(worker, usdt, user):
    deposit_through_custody(user, usdt, "100")
    destination = new_address()
    SimulatedCustody().fault_add(operation="submit", kind="timeout", address=destination)

    book_address(user, usdt, destination)
    withdrawal = withdrawal_request(user_id=user.id, asset_code="USDT", amount="30", address=destination)

    assert withdrawal.status == WithdrawalStatus.APPROVED  # auto-approved, submitted by the worker
    wait_for(
        lambda: Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.COMPLETED,
        message="the withdrawal to complete",
    )
    withdrawal.refresh_from_db()
    at_custody = SimWithdrawal.objects.get()
    assert (at_custody.client_reference, at_custody.requests) == (str(withdrawal.pk), 2)
    assert withdrawal.submit_attempts == 2
    _available, held_account = user_accounts(user.id, usdt)
    history = [(p.entry.idempotency_key, p.amount) for p in held_account.postings.select_related("entry")]
    assert history == [  # the hold was never released, only spent
        (f"withdrawal:{withdrawal.pk}:hold", Decimal(-30)),
        (f"withdrawal:{withdrawal.pk}:complete", Decimal(30)),
    ]
    assert available(user, usdt) == Decimal(70)
    wait_for(all_events_processed, message="the inbox to drain")
    assert reconcile().ok


def _locked(table: str, pk: int) -> bool:
    """Whether another transaction holds a lock on the row (probed with ``FOR UPDATE NOWAIT``)."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR UPDATE NOWAIT", [pk])
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == "55P03":  # lock_not_available
            return True
        raise
    return False


def _someone_waits_for_a_lock() -> bool:
    """Whether another session of the test database waits for a row lock (a worker blocked mid-batch).

    Read from ``pg_stat_activity``: probing the rows with a lock of our own could take the lock before
    the worker does, and the worker would skip them."""
    return bool(backend_pids("datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"))


def _account_locked_by_test(account_id: int) -> None:
    """Inside the caller's transaction: lock a ledger account as another transaction posting to it would, so a
    worker crediting it waits there, in the middle of its batch (read-only here: the ledger writes nothing)."""
    Account.objects.select_for_update(of=("self",), no_key=True).get(pk=account_id)


def test_worker_killed_while_crediting_a_deposit_loses_nothing_and_credits_once(workers, callback_url, btc, user):
    """SIGKILL the worker in the middle of the deposit's transaction; the next worker to start credits it once,
    without waiting for the sweep (the sweep would find it too)."""
    available_account, _held = user_accounts(user.id, btc)
    address = deposit_address_get_or_create(user_id=user.id, asset=btc).address
    victim = workers.start(pool="solo", concurrency=1)

    with transaction.atomic():
        _account_locked_by_test(available_account.pk)
        assert post(callback_url, deposit_payload(address, "0.7", txid="K")) == 200
        event = CustodyEvent.objects.get()
        # The worker holds the event (and has recorded the deposit), waiting to post the credit.
        wait_for(_someone_waits_for_a_lock, message="the worker to be in the middle of the credit")
        victim.kill()

    assert victim.process.returncode == -signal.SIGKILL
    wait_for(lambda: not _locked("wallets_custodyevent", event.pk), message="PostgreSQL to roll the batch back")
    event.refresh_from_db()
    assert event.state == EventState.RECEIVED
    assert not Deposit.objects.exists()
    assert available(user, btc) == 0
    assert custody_events_requeue(older_than=timedelta(0)) == [event.pk]  # what the sweep would find

    workers.start()

    wait_for(lambda: credited("K"), message="the deposit to be credited by the new worker")
    wait_for(all_events_processed, message="the inbox to drain")
    assert available(user, btc) == Decimal("0.7")
    assert JournalEntry.objects.filter(idempotency_key="deposit:simnet:K:0").count() == 1
    assert custody_events_requeue(older_than=timedelta(0)) == []


BURST_USERS = 10
BURST = 200


def test_worker_killed_mid_burst_every_stored_callback_is_credited_once_within_30_s_of_the_restart(
    workers, callback_url, btc
):
    """A burst of callbacks; the worker is SIGKILLed in the middle of a batch with half of them stored; once a
    worker starts again, every stored callback is credited exactly once within 30 s (the wait's deadline)."""
    users = [UserFactory() for _ in range(BURST_USERS)]
    addresses = [deposit_address_get_or_create(user_id=user.id, asset=btc).address for user in users]
    accounts = [user_accounts(user.id, btc)[0] for user in users]
    payloads = [
        deposit_payload(addresses[n % BURST_USERS], "0.01", txid=f"burst-{n}", event_id=f"burst-{n}")
        for n in range(BURST)
    ]
    victim = workers.start(pool="solo", concurrency=1)

    def send(batch):
        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(lambda payload: post(callback_url, payload), batch))

    first, second = payloads[: BURST // 2], payloads[BURST // 2 :]
    assert send(first) == [200] * len(first)
    wait_for(lambda: Deposit.objects.filter(status=DepositStatus.CREDITED).exists(), message="the first credits")
    with transaction.atomic():
        _account_locked_by_test(accounts[0].pk)
        assert send(second) == [200] * len(second)
        wait_for(_someone_waits_for_a_lock, message="the worker to be in the middle of a batch")
        victim.kill()
    assert victim.process.returncode == -signal.SIGKILL
    left = CustodyEvent.objects.filter(state=EventState.RECEIVED).count()
    assert 0 < left < BURST  # killed mid-burst: some credited, some not

    workers.start(pool="solo", concurrency=1)

    wait_for(all_events_processed, timeout=30, message="every stored callback to be applied")
    assert CustodyEvent.objects.filter(state=EventState.PROCESSED).count() == BURST
    assert Deposit.objects.filter(status=DepositStatus.CREDITED).count() == BURST
    assert JournalEntry.objects.filter(idempotency_key__startswith="deposit:simnet:burst-").count() == BURST
    per_user = Decimal("0.01") * (BURST // BURST_USERS)
    assert [available(user, btc) for user in users] == [per_user] * BURST_USERS
    assert system_account(AccountKind.CUSTODY, btc).balance == Decimal("0.01") * BURST
