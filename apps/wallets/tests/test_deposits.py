"""Deposits: recorded from custody events, credited once at the asset's confirmations (invariant 8)."""

import threading
from decimal import Decimal

import pytest
from django.db import connections

from apps.accounts.errors import WithdrawalsBlocked
from apps.accounts.models import AccountRestriction
from apps.accounts.restrictions import account_withdrawals_block
from apps.audit.models import AuditLogEntry
from apps.core.errors import InvalidState
from apps.ledger.models import AccountKind, JournalEntry
from apps.ledger.services import system_account, user_accounts
from apps.ledger.tests.factories import UserFactory
from apps.wallets import tasks
from apps.wallets.custody import simnet
from apps.wallets.models import CustodyEvent, Deposit, DepositStatus, EventState
from apps.wallets.services import (
    custody_event_process,
    custody_event_receive,
    custody_events_process_batch,
    deposit_address_get_or_create,
    deposit_credit,
    withdrawal_request,
)

from .conftest import make_blocker
from .factories import deposit_payload, deposit_through_custody, signed


def receive_and_process(payload: dict) -> CustodyEvent:
    event, _created = custody_event_receive(body=signed(payload)[0])
    return custody_event_process(event_pk=event.pk)


def available(user, asset) -> Decimal:
    return user_accounts(user.id, asset)[0].balance


@pytest.fixture
def address(btc, user) -> str:
    return deposit_address_get_or_create(user_id=user.id, asset=btc).address


def test_deposit_is_pending_until_the_assets_confirmations_then_credited_once(btc, user, address):
    type(btc).objects.filter(pk=btc.pk).update(confirmations_required=3)
    reports = [(0, "pending"), (1, "pending"), (2, "pending"), (3, "confirmed"), (3, "confirmed")]

    states = []
    for count, status in reports:
        event = receive_and_process(
            deposit_payload(
                address, "1.5", txid="c1", confirmations=count, status=status, event_id=f"c1-{count}-{status}"
            )
        )
        deposit = Deposit.objects.get()
        states.append((event.state, deposit.status, deposit.confirmations, available(user, btc)))

    assert states == [
        ("processed", "pending", 0, 0),
        ("processed", "pending", 1, 0),
        ("processed", "pending", 2, 0),
        ("processed", "credited", 3, Decimal("1.5")),
        ("processed", "credited", 3, Decimal("1.5")),  # the same report under another event id
    ]
    deposit = Deposit.objects.get()
    entry = JournalEntry.objects.get(idempotency_key="deposit:simnet:c1:0")
    assert deposit.entry_id == entry.id and deposit.credited_at is not None
    assert system_account(AccountKind.CUSTODY, btc).balance == Decimal("1.5")


def test_confirmations_reported_out_of_order_never_go_down(btc, user, address):
    type(btc).objects.filter(pk=btc.pk).update(confirmations_required=6)
    receive_and_process(deposit_payload(address, "1", txid="c2", confirmations=4, status="pending", event_id="c2-4"))
    receive_and_process(deposit_payload(address, "1", txid="c2", confirmations=2, status="pending", event_id="c2-2"))

    assert Deposit.objects.get().confirmations == 4


def test_confirmed_report_without_a_count_is_final(btc, user, address):
    type(btc).objects.filter(pk=btc.pk).update(confirmations_required=6)

    receive_and_process(deposit_payload(address, "1", txid="c3", confirmations=None, status="confirmed"))

    assert Deposit.objects.get().status == DepositStatus.CREDITED
    assert available(user, btc) == Decimal(1)


def test_a_confirmed_report_short_of_our_confirmations_stays_pending(btc, user, address):
    type(btc).objects.filter(pk=btc.pk).update(confirmations_required=6)

    receive_and_process(deposit_payload(address, "1", txid="c4", confirmations=2, status="confirmed"))

    assert Deposit.objects.get().status == DepositStatus.PENDING
    assert available(user, btc) == 0


def test_deposit_credit_refuses_a_deposit_short_of_confirmations(btc, user, address):
    type(btc).objects.filter(pk=btc.pk).update(confirmations_required=2)
    receive_and_process(deposit_payload(address, "1", txid="c5", confirmations=1, status="pending"))

    with pytest.raises(InvalidState):
        deposit_credit(deposit_id=Deposit.objects.get().pk)

    assert not JournalEntry.objects.filter(idempotency_key="deposit:simnet:c5:0").exists()


def test_a_pending_deposit_reported_failed_is_never_credited(btc, user, address):
    type(btc).objects.filter(pk=btc.pk).update(confirmations_required=2)
    receive_and_process(deposit_payload(address, "1", txid="c6", confirmations=1, status="pending"))
    receive_and_process(deposit_payload(address, "1", txid="c6", confirmations=None, status="failed"))

    late = receive_and_process(deposit_payload(address, "1", txid="c6", confirmations=2, status="confirmed"))

    assert Deposit.objects.get().status == DepositStatus.FAILED
    assert late.state == EventState.REJECTED
    assert available(user, btc) == 0


def _withdrawals_blocked_by_the_system(user) -> None:
    """The user's withdrawals are blocked with no operator, audited with no actor, and a withdrawal is refused."""
    restriction = AccountRestriction.objects.get(user=user)
    assert (restriction.withdrawals_blocked, restriction.updated_by_id) == (True, None)
    deposit = Deposit.objects.get(user=user)
    assert restriction.withdrawals_reason.startswith(f"Deposit #{deposit.pk} was credited and custody")
    audit = AuditLogEntry.objects.get(action="account.withdrawals_block", object_id=str(user.id))
    assert (audit.actor_id, audit.after["withdrawals_blocked"]) == (None, True)
    with pytest.raises(WithdrawalsBlocked):
        withdrawal_request(user_id=user.id, asset_code="BTC", amount="0.5", address=simnet.new_address())


def test_a_credited_deposit_reported_failed_is_left_for_an_operator_and_its_owner_cannot_withdraw(btc, user, address):
    """Break-it review: a credited deposit reported failed (a reorganisation) stayed spendable, and its owner
    withdrew it; nothing told the operators but the rejected event's error."""
    receive_and_process(deposit_payload(address, "1", txid="c7"))

    event = receive_and_process(deposit_payload(address, "1", txid="c7", confirmations=None, status="failed"))

    assert event.state == EventState.REJECTED
    assert event.error.startswith(f"Deposit #{Deposit.objects.get().pk} was credited and is now reported failed")
    assert Deposit.objects.get().status == DepositStatus.CREDITED
    assert available(user, btc) == Decimal(1)
    _withdrawals_blocked_by_the_system(user)


def test_a_credited_deposit_reported_failed_in_a_batch_blocks_its_owners_withdrawals(btc, user, address):
    receive_and_process(deposit_payload(address, "1", txid="c8"))
    other = UserFactory()
    other_address = deposit_address_get_or_create(user_id=other.id, asset=btc).address
    for payload in (
        deposit_payload(address, "1", txid="c8", confirmations=None, status="failed", event_id="c8-failed"),
        deposit_payload(other_address, "2", txid="c9", event_id="c9"),  # the rest of the batch applies
    ):
        custody_event_receive(body=signed(payload)[0])

    batch = custody_events_process_batch(limit=10)

    states = dict(CustodyEvent.objects.values_list("event_id", "state"))
    assert (batch.claimed, states["c8-failed"], states["c9"]) == (2, EventState.REJECTED, EventState.PROCESSED)
    assert available(other, btc) == Decimal(2) and available(user, btc) == Decimal(1)
    _withdrawals_blocked_by_the_system(user)
    assert not AccountRestriction.objects.filter(user=other).exists()


def test_a_system_block_adds_its_reason_to_an_operators_block(btc, user, address):
    operator = make_blocker()
    account_withdrawals_block(user_id=user.id, operator_id=operator.id, blocked=True, reason="fraud review.")
    receive_and_process(deposit_payload(address, "1", txid="c10"))

    receive_and_process(deposit_payload(address, "1", txid="c10", confirmations=None, status="failed"))

    restriction = AccountRestriction.objects.get(user=user)
    deposit = Deposit.objects.get()
    assert restriction.withdrawals_reason.startswith(f"fraud review. Deposit #{deposit.pk} was credited and custody")
    assert restriction.updated_by_id is None
    audits = AuditLogEntry.objects.filter(action="account.withdrawals_block").order_by("id")
    assert [audit.actor_id for audit in audits] == [operator.id, None]


def test_a_report_contradicting_the_recorded_deposit_is_rejected(btc, user, address):
    receive_and_process(deposit_payload(address, "1", txid="c8", confirmations=0, status="pending"))

    event = receive_and_process(deposit_payload(address, "2", txid="c8", confirmations=1, event_id="c8-again"))

    assert event.state == EventState.REJECTED
    assert Deposit.objects.get().amount == Decimal(1)
    assert available(user, btc) == 0


def test_a_report_of_coins_at_the_users_address_of_another_asset_is_rejected_for_an_operator(btc, usdt, user):
    """Issue 14, hole 4: such a report was credited in the reported asset; a real chain cannot deliver BTC to a
    USDT address, so the report is wrong and waits for an operator, crediting nothing."""
    usdt_address = deposit_address_get_or_create(user_id=user.id, asset=usdt).address

    event = receive_and_process(deposit_payload(usdt_address, "0.25", asset="BTC", txid="c9"))

    assert event.state == EventState.REJECTED
    assert available(user, btc) == 0
    assert available(user, usdt) == 0


def test_two_outputs_of_one_transaction_to_two_users_are_two_deposits(btc):
    first, second = UserFactory(), UserFactory()
    for user, vout, amount in [(first, 0, "0.5"), (second, 1, "0.25")]:
        address = deposit_address_get_or_create(user_id=user.id, asset=btc).address
        receive_and_process(deposit_payload(address, amount, txid="same", vout=vout))

    assert (available(first, btc), available(second, btc)) == (Decimal("0.5"), Decimal("0.25"))
    assert sorted(Deposit.objects.values_list("vout", "status")) == [(0, "credited"), (1, "credited")]


def test_processing_a_processed_event_again_changes_nothing(btc, user, address):
    event = receive_and_process(deposit_payload(address, "1", txid="c10"))

    again = custody_event_process(event_pk=event.pk)

    assert again.state == EventState.PROCESSED
    assert available(user, btc) == Decimal(1)
    assert JournalEntry.objects.count() == 1


def test_deposit_through_custody_helper_credits_and_keeps_custody_in_step(btc, user):
    deposit = deposit_through_custody(user, btc, "0.3")

    assert deposit.status == DepositStatus.CREDITED
    assert available(user, btc) == Decimal("0.3")


@pytest.mark.django_db(transaction=True)
def test_two_drains_at_the_same_time_credit_once(btc, user):
    address = deposit_address_get_or_create(user_id=user.id, asset=btc).address
    custody_event_receive(body=signed(deposit_payload(address, "2", txid="twice"))[0])
    barrier = threading.Barrier(2)
    results = []

    def run():
        try:
            barrier.wait()
            results.append(tasks.custody_events_drain())  # the task body, in this thread
        except Exception as exc:  # collected for the assertion
            results.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(results) == [0, 1]  # one drain applied the event, the other found nothing left
    assert available(user, btc) == Decimal(2)
    assert JournalEntry.objects.filter(idempotency_key="deposit:simnet:twice:0").count() == 1
    assert Deposit.objects.get().status == DepositStatus.CREDITED


def test_a_deposit_beyond_what_a_balance_can_hold_is_rejected_for_an_operator_not_crashed(btc, user, address):
    receive_and_process(deposit_payload(address, "99999999999.99999999", txid="tx-big-1"))

    event = receive_and_process(deposit_payload(address, "99999999999.99999999", txid="tx-big-2"))
    assert event.state == EventState.PROCESSED  # two fit

    from apps.ledger.tests.factories import fund

    fund(user, btc, "99999999799999999999")  # the user's balance is now close to 10^20
    event = receive_and_process(deposit_payload(address, "99999999999.99999999", txid="tx-big-3"))

    assert event.state == EventState.REJECTED
    assert "10^20" in event.error
    assert not Deposit.objects.filter(txid="tx-big-3").exists()  # nothing applied; the event waits for an operator


def test_the_simulated_custody_refuses_a_deposit_its_books_cannot_hold(btc, user, address):
    from apps.wallets.custody.simulator.provider import SimulatedCustody

    deposit_through_custody(user, btc, "1")
    with pytest.raises(ValueError, match="too large"):
        SimulatedCustody().deposit_receive(address=address, amount=Decimal("99999999999999999999"), delay=0)
