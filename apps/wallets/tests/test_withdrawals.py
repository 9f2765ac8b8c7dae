"""Withdrawals: request checks, holds, the state machine of DESIGN.md section 8, custody outcomes."""

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connections, transaction
from django.utils import timezone

from apps.accounts.errors import WithdrawalsBlocked
from apps.accounts.restrictions import account_withdrawals_block, account_withdrawals_unblock
from apps.core.errors import DomainError, InvalidAddress, InvalidState, NotFound, PermissionDenied
from apps.ledger.errors import IdempotencyConflict, InsufficientFunds
from apps.ledger.models import AccountKind, EntryReason, JournalEntry
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import funds_hold, system_account, user_accounts
from apps.ledger.tests.factories import UserFactory, fund
from apps.wallets.address_book import AddressNotAllowed
from apps.wallets.custody.base import CustodyUnavailable
from apps.wallets.custody.simnet import new_address
from apps.wallets.custody.simulator.models import SimWithdrawal
from apps.wallets.custody.simulator.provider import SimulatedCustody
from apps.wallets.errors import EventNotReady, WithdrawalLimit
from apps.wallets.models import CustodyEvent, EventState, Withdrawal, WithdrawalAddress, WithdrawalStatus
from apps.wallets.selectors import withdrawals_to_decide
from apps.wallets.services import (
    WITHDRAWALS_BLOCKED_HELD,
    custody_event_process,
    custody_event_receive,
    withdrawal_approve,
    withdrawal_cancel,
    withdrawal_complete,
    withdrawal_fail,
    withdrawal_reject,
    withdrawal_request,
    withdrawal_submit,
    withdrawals_requeue_submission,
)

from .conftest import backend_pids, make_blocker, make_operator, wait_for
from .factories import book_address, deliver_custody_callbacks, deposit_through_custody, signed

DESTINATION = new_address()


def balances(user, asset) -> tuple[Decimal, Decimal]:
    available, held = user_accounts(user.id, asset)
    return available.balance, held.balance


def request(user, amount: str, *, asset: str = "USDT", address: str = DESTINATION, **kwargs) -> Withdrawal:
    """A withdrawal to ``address``, an active entry of the user's address book."""
    book_address(user, asset, address)
    return withdrawal_request(user_id=user.id, asset_code=asset, amount=amount, address=address, **kwargs)


def entries(withdrawal: Withdrawal) -> list[str]:
    keys = JournalEntry.objects.filter(reference_type="withdrawal", reference_id=str(withdrawal.pk))
    return sorted(key.rsplit(":", 1)[1] for key in keys.values_list("idempotency_key", flat=True))


@pytest.fixture
def awaiting(usdt, user) -> Withdrawal:
    """A withdrawal of 150 USDT (above the auto-approval limit of 100) from a user holding 1,000."""
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=Decimal(100))
    deposit_through_custody(user, usdt, "1000")
    withdrawal = request(user, "150")
    assert withdrawal.status == WithdrawalStatus.AWAITING_APPROVAL
    return withdrawal


# Requests ------------------------------------------------------------------------------------------


def test_request_holds_amount_plus_fee_and_small_amounts_are_approved_at_once(usdt, user):
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_fee=Decimal("1.5"))
    fund(user, usdt, "100")

    withdrawal = request(user, "20")

    assert withdrawal.status == WithdrawalStatus.APPROVED
    assert (withdrawal.amount, withdrawal.fee, withdrawal.hold_remaining) == (
        Decimal(20),
        Decimal("1.5"),
        Decimal("21.5"),
    )
    assert balances(user, usdt) == (Decimal("78.5"), Decimal("21.5"))
    hold = JournalEntry.objects.get(idempotency_key=f"withdrawal:{withdrawal.pk}:hold")
    assert hold.reason == EntryReason.WITHDRAWAL_HOLD


def test_amounts_above_the_auto_approval_limit_await_an_operator(usdt, user):
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=Decimal(50))
    fund(user, usdt, "200")

    assert request(user, "50").status == WithdrawalStatus.APPROVED
    assert request(user, "50.000001").status == WithdrawalStatus.AWAITING_APPROVAL


def test_the_auto_approval_limit_bounds_what_leaves_without_an_operator_in_24_hours(usdt, user, operator):
    """Withdrawals at the limit one after the other: the limit bounds their total, not each one (from a break-it
    review: 3 x 0.5 BTC left at once with a limit of 0.5)."""
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=Decimal(100))
    fund(user, usdt, "1000")

    assert [request(user, amount).status for amount in ("60", "40", "1")] == [
        WithdrawalStatus.APPROVED,
        WithdrawalStatus.APPROVED,
        WithdrawalStatus.AWAITING_APPROVAL,
    ]
    reviewed = withdrawal_approve(withdrawal_id=Withdrawal.objects.get(amount=1).pk, operator_id=operator.id)
    assert reviewed.status == WithdrawalStatus.APPROVED
    assert request(user, "1").status == WithdrawalStatus.AWAITING_APPROVAL  # what an operator approved is not free

    failed = withdrawal_submit(withdrawal_id=Withdrawal.objects.get(amount=60).pk)
    assert failed.status == WithdrawalStatus.FAILED  # custody holds none of the funds fund() credited: released
    assert request(user, "60").status == WithdrawalStatus.APPROVED

    Withdrawal.objects.filter(decided_by__isnull=True).update(
        decided_at=timezone.now() - timedelta(hours=24, seconds=1)
    )
    assert request(user, "100").status == WithdrawalStatus.APPROVED  # the day's total starts afresh


@pytest.mark.django_db(transaction=True)
def test_withdrawals_racing_at_the_auto_approval_limit_approve_only_up_to_it(usdt, user):
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=Decimal(100))
    fund(user, usdt, "1000")
    barrier = threading.Barrier(6)
    statuses = []

    def attempt():
        try:
            barrier.wait()
            statuses.append(request(user, "50").status)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=attempt) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(statuses) == sorted([WithdrawalStatus.APPROVED] * 2 + [WithdrawalStatus.AWAITING_APPROVAL] * 4)
    assert balances(user, usdt) == (Decimal(700), Decimal(300))


@pytest.mark.parametrize(
    "amount",
    ["0", "-5", "0.0000001", "1e2", "NaN", "Infinity", " 5", "5,0", 5.0, None, True],
    ids=str,
)
def test_bad_amounts_are_refused_naming_the_field_and_nothing_is_written(usdt, user, amount):
    fund(user, usdt, "100")

    with pytest.raises(DomainError) as refused:
        withdrawal_request(user_id=user.id, asset_code="USDT", amount=amount, address=DESTINATION)

    assert "amount" in refused.value.fields
    assert not Withdrawal.objects.exists()
    assert balances(user, usdt) == (Decimal(100), Decimal(0))


@pytest.mark.parametrize(
    "address",
    [
        "",
        "sim1",
        DESTINATION.upper(),
        DESTINATION[:-1] + ("0" if DESTINATION[-1] != "0" else "1"),
        DESTINATION + "0",
        " " + DESTINATION,
        "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa",
        None,
        42,
    ],
    ids=[
        "empty",
        "prefix-only",
        "upper-case",
        "bad-checksum",
        "too-long",
        "leading-space",
        "bitcoin",
        "none",
        "number",
    ],
)
def test_invalid_addresses_are_refused_and_nothing_is_written(usdt, user, address):
    fund(user, usdt, "100")

    with pytest.raises(InvalidAddress) as refused:
        withdrawal_request(user_id=user.id, asset_code="USDT", amount="10", address=address)

    assert refused.value.code == "invalid_address"
    assert "address" in refused.value.fields
    assert not Withdrawal.objects.exists()


def test_a_network_without_an_address_validator_accepts_no_address(usdt, user):
    type(usdt).objects.filter(pk=usdt.pk).update(network="othernet")
    fund(user, usdt, "100")

    with pytest.raises(InvalidAddress):
        request(user, "10")


def test_unknown_asset_is_refused_naming_the_field(db, user):
    with pytest.raises(DomainError) as refused:
        withdrawal_request(user_id=user.id, asset_code="DOGE", amount="1", address=DESTINATION)

    assert refused.value.fields == {"asset": "Unknown asset."}


def test_below_the_minimum_is_a_withdrawal_limit(usdt, user):
    fund(user, usdt, "100")

    with pytest.raises(WithdrawalLimit) as refused:
        request(user, "0.999999")

    assert refused.value.code == "withdrawal_limit"
    assert "amount" in refused.value.fields
    assert request(user, "1").status == WithdrawalStatus.APPROVED


def test_daily_limit_counts_the_last_24_hours_and_not_released_withdrawals(usdt, user):
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_daily_limit=Decimal(100), withdrawal_auto_approve_limit=0)
    fund(user, usdt, "1000")
    first = request(user, "60")
    cancelled = request(user, "30")
    withdrawal_cancel(withdrawal_id=cancelled.pk, user_id=user.id)

    with pytest.raises(WithdrawalLimit) as refused:
        request(user, "40.000001")
    assert "40.000000 left" in refused.value.message

    assert request(user, "40").status == WithdrawalStatus.AWAITING_APPROVAL
    with pytest.raises(WithdrawalLimit):
        request(user, "1")
    Withdrawal.objects.filter(pk=first.pk).update(created_at=timezone.now() - timedelta(hours=24, seconds=1))
    assert request(user, "60").status == WithdrawalStatus.AWAITING_APPROVAL


def test_a_daily_limit_of_zero_allows_no_withdrawal(usdt, user):
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_daily_limit=0)
    fund(user, usdt, "100")

    with pytest.raises(WithdrawalLimit):
        request(user, "1")


def test_request_key_replays_the_same_withdrawal_and_refuses_another(usdt, user):
    fund(user, usdt, "100")
    first = request(user, "10", request_key="k-1")

    assert request(user, "10", request_key="k-1").pk == first.pk
    with pytest.raises(IdempotencyConflict):
        request(user, "11", request_key="k-1")
    assert balances(user, usdt) == (Decimal(90), Decimal(10))


@pytest.mark.django_db(transaction=True)
def test_s3_two_withdrawals_of_60_at_once_from_100(usdt, user):
    """SCENARIOS.md S3: exactly one is accepted, the other gets insufficient_funds; available 40, held 60."""
    fund(user, usdt, "100")
    barrier = threading.Barrier(2)
    results = []

    def attempt():
        try:
            barrier.wait()
            results.append(request(user, "60"))
        except Exception as exc:  # collected for the assertion
            results.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=attempt) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(type(result).__name__ for result in results) == ["InsufficientFunds", "Withdrawal"]
    refused = next(result for result in results if isinstance(result, InsufficientFunds))
    assert refused.code == "insufficient_funds"
    assert balances(user, usdt) == (Decimal(40), Decimal(60))
    assert Withdrawal.objects.count() == 1


def test_s4_funds_held_by_an_order_cannot_be_withdrawn(usdt, user):
    """SCENARIOS.md S4: 100 USDT with 80 held by an open buy order: 30 is refused, 20 is accepted."""
    fund(user, usdt, "100")
    funds_hold(
        user_id=user.id,
        asset=usdt,
        amount=Decimal(80),
        idempotency_key="order:1:hold",
        reason=EntryReason.ORDER_HOLD,
        reference_type="order",
        reference_id="1",
    )

    with pytest.raises(InsufficientFunds):
        request(user, "30")
    assert not Withdrawal.objects.exists()

    accepted = request(user, "20")
    assert accepted.hold_remaining == Decimal(20)
    assert balances(user, usdt) == (Decimal(0), Decimal(100))


# Approval, rejection, cancellation ----------------------------------------------------------------


def test_approval_needs_the_permission(awaiting, user):
    clerk = UserFactory()

    with pytest.raises(PermissionDenied) as refused:
        withdrawal_approve(withdrawal_id=awaiting.pk, operator_id=clerk.id)

    assert (refused.value.code, refused.value.status) == ("permission_denied", 403)
    awaiting.refresh_from_db()
    assert awaiting.status == WithdrawalStatus.AWAITING_APPROVAL


def test_operators_cannot_approve_their_own_withdrawal(usdt):
    owner = make_operator()
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=0)
    fund(owner, usdt, "100")
    withdrawal = request(owner, "10")

    with pytest.raises(PermissionDenied):
        withdrawal_approve(withdrawal_id=withdrawal.pk, operator_id=owner.id)


def test_approval_queues_the_submission_on_commit_and_a_second_approval_is_refused(
    awaiting, operator, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as queued:
        approved = withdrawal_approve(withdrawal_id=awaiting.pk, operator_id=operator.id)

    assert approved.status == WithdrawalStatus.APPROVED
    assert (approved.decided_by_id, approved.decided_at is not None) == (operator.id, True)
    assert [c.__qualname__ for c in queued] == ["ring", "task_send"]  # the stream relay rung, custody's task queued
    with pytest.raises(InvalidState) as refused:
        withdrawal_approve(withdrawal_id=awaiting.pk, operator_id=make_operator().id)
    assert (refused.value.code, refused.value.status) == ("invalid_state", 409)


def test_an_address_removed_from_the_book_since_the_request_cannot_be_approved(
    awaiting, operator, user, usdt, django_capture_on_commit_callbacks
):
    """Break-it review: the customer deleted the address while the withdrawal awaited an operator, who approved it,
    and custody sent the funds there. The approval is refused (nothing queued); the operator rejects it."""
    WithdrawalAddress.objects.filter(user=user, address=awaiting.address).delete()

    with django_capture_on_commit_callbacks() as queued, pytest.raises(AddressNotAllowed) as refused:
        withdrawal_approve(withdrawal_id=awaiting.pk, operator_id=operator.id)

    assert (
        refused.value.message
        == "The address is no longer active in the customer's address book: reject the withdrawal."
    )
    assert queued == []
    awaiting.refresh_from_db()
    assert (awaiting.status, awaiting.decided_by_id) == (WithdrawalStatus.AWAITING_APPROVAL, None)
    withdrawal_reject(withdrawal_id=awaiting.pk, operator_id=operator.id, reason="address removed")
    assert balances(user, usdt) == (Decimal(1000), Decimal(0))


def test_rejected_withdrawal_is_released_once_and_can_be_neither_approved_nor_completed(awaiting, operator, user, usdt):
    rejected = withdrawal_reject(withdrawal_id=awaiting.pk, operator_id=operator.id, reason="Unknown destination.")

    assert (rejected.status, rejected.hold_remaining, rejected.reason) == ("rejected", 0, "Unknown destination.")
    assert balances(user, usdt) == (Decimal(1000), Decimal(0))
    for attempt in [
        lambda: withdrawal_approve(withdrawal_id=awaiting.pk, operator_id=operator.id),
        lambda: withdrawal_complete(withdrawal_id=awaiting.pk, txid="t1"),
        lambda: withdrawal_fail(withdrawal_id=awaiting.pk, reason="x"),
        lambda: withdrawal_reject(withdrawal_id=awaiting.pk, operator_id=operator.id, reason="again"),
        lambda: withdrawal_cancel(withdrawal_id=awaiting.pk, user_id=user.id),
    ]:
        with pytest.raises(InvalidState):
            attempt()
    assert entries(awaiting) == ["hold", "release"]
    assert balances(user, usdt) == (Decimal(1000), Decimal(0))
    assert reconcile().ok


def test_rejection_needs_a_reason(awaiting, operator):
    with pytest.raises(DomainError) as refused:
        withdrawal_reject(withdrawal_id=awaiting.pk, operator_id=operator.id, reason="  ")

    assert "reason" in refused.value.fields


def test_a_rejection_reason_shown_to_the_customer_is_bounded(awaiting, operator):
    """Regression (break-it review): a 5,000-character reason was stored and shown on the customer's wallet page."""
    with pytest.raises(DomainError) as refused:
        withdrawal_reject(withdrawal_id=awaiting.pk, operator_id=operator.id, reason="x" * 501)

    assert refused.value.fields == {"reason": "At most 500 characters."}
    awaiting.refresh_from_db()
    assert awaiting.status == WithdrawalStatus.AWAITING_APPROVAL
    rejected = withdrawal_reject(withdrawal_id=awaiting.pk, operator_id=operator.id, reason=f"  {'x' * 500}  ")
    assert rejected.reject_reason == "x" * 500


def test_the_user_cancels_while_awaiting_approval_but_not_once_approved(awaiting, operator, user, usdt):
    stranger = UserFactory()
    with pytest.raises(NotFound):
        withdrawal_cancel(withdrawal_id=awaiting.pk, user_id=stranger.id)

    cancelled = withdrawal_cancel(withdrawal_id=awaiting.pk, user_id=user.id)

    assert cancelled.status == WithdrawalStatus.CANCELLED
    assert balances(user, usdt) == (Decimal(1000), Decimal(0))
    approved = request(user, "10")
    assert approved.status == WithdrawalStatus.APPROVED
    with pytest.raises(InvalidState):
        withdrawal_cancel(withdrawal_id=approved.pk, user_id=user.id)


# Submission and custody outcomes ------------------------------------------------------------------


def test_completed_withdrawal_posts_the_recipes_with_fee_and_network_fee(usdt, user):
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_fee=Decimal(2))
    deposit_through_custody(user, usdt, "100")
    withdrawal = request(user, "50")

    submitted = withdrawal_submit(withdrawal_id=withdrawal.pk)
    assert submitted.status == WithdrawalStatus.SUBMITTED
    deliver_custody_callbacks()

    withdrawal.refresh_from_db()
    assert (withdrawal.status, withdrawal.hold_remaining, withdrawal.network_fee) == (
        WithdrawalStatus.COMPLETED,
        0,
        Decimal("0.5"),
    )
    assert withdrawal.txid == SimWithdrawal.objects.get().txid
    assert balances(user, usdt) == (Decimal(48), Decimal(0))
    assert system_account(AccountKind.CUSTODY, usdt).balance == Decimal("49.5")  # 100 - 50 - 0.5
    fee_revenue = JournalEntry.objects.get(idempotency_key=f"withdrawal:{withdrawal.pk}:complete").postings.filter(
        account__kind=AccountKind.FEE_REVENUE
    )
    assert [posting.amount for posting in fee_revenue] == [Decimal(-2)]
    assert system_account(AccountKind.NETWORK_FEE_EXPENSE, usdt).balance == Decimal("0.5")
    assert entries(withdrawal) == ["complete", "hold", "network-fee"]
    assert reconcile().ok


@pytest.mark.parametrize("change", [{"txid": "another-txid"}, {"network_fee": "99999"}])
def test_a_second_completion_report_that_contradicts_the_first_is_rejected_for_an_operator(usdt, user, change):
    deposit_through_custody(user, usdt, "100")
    withdrawal = request(user, "50")
    withdrawal_submit(withdrawal_id=withdrawal.pk)
    deliver_custody_callbacks()
    withdrawal.refresh_from_db()
    report = {
        "event_id": f"again-{withdrawal.pk}",
        "type": "withdrawal",
        "asset": "USDT",
        "amount": "50.000000",
        "txid": withdrawal.txid,
        "status": "completed",
        "withdrawal_id": str(withdrawal.pk),
        "network_fee": f"{withdrawal.network_fee:f}",
        **change,
    }

    event, _ = custody_event_receive(body=signed(report)[0])
    event = custody_event_process(event_pk=event.pk)

    assert event.state == EventState.REJECTED
    assert "completed again" in event.error
    assert entries(withdrawal) == ["complete", "hold", "network-fee"]
    assert reconcile().ok


def test_a_withdrawal_to_another_users_deposit_address_arrives_as_their_deposit(usdt, user):
    from apps.wallets.services import deposit_address_get_or_create

    deposit_through_custody(user, usdt, "100")
    friend = UserFactory()
    address = deposit_address_get_or_create(user_id=friend.id, asset=usdt).address
    withdrawal = request(user, "40", address=address)
    withdrawal_submit(withdrawal_id=withdrawal.pk)  # settled at once as an internal transfer (hole 4)

    assert not SimWithdrawal.objects.exists()  # never sent through custody
    assert balances(user, usdt) == (Decimal(60), Decimal(0))
    assert balances(friend, usdt) == (Decimal(40), Decimal(0))
    assert reconcile().ok


def test_custody_timeout_keeps_the_hold_and_the_retry_sends_the_same_withdrawal_once(usdt, user):
    deposit_through_custody(user, usdt, "100")
    SimulatedCustody().fault_add(operation="submit", kind="timeout", address=DESTINATION)
    withdrawal = request(user, "30")

    with pytest.raises(CustodyUnavailable):
        withdrawal_submit(withdrawal_id=withdrawal.pk)

    withdrawal.refresh_from_db()
    assert (withdrawal.status, withdrawal.submit_attempts) == (WithdrawalStatus.APPROVED, 1)
    assert "timed out" in withdrawal.last_error
    assert balances(user, usdt) == (Decimal(70), Decimal(30))
    assert SimWithdrawal.objects.get().client_reference == str(withdrawal.pk)  # custody did get it

    retried = withdrawal_submit(withdrawal_id=withdrawal.pk)

    assert (retried.status, retried.submit_attempts, retried.last_error) == (WithdrawalStatus.SUBMITTED, 2, "")
    assert SimWithdrawal.objects.get().requests == 2
    assert balances(user, usdt) == (Decimal(70), Decimal(30))
    deliver_custody_callbacks()
    assert balances(user, usdt) == (Decimal(70), Decimal(0))
    assert entries(withdrawal) == ["complete", "hold", "network-fee"]
    assert reconcile().ok


def test_custody_not_answering_at_all_keeps_the_hold_and_nothing_reaches_custody(usdt, user):
    deposit_through_custody(user, usdt, "100")
    SimulatedCustody().fault_add(operation="submit", kind="unavailable", address=DESTINATION)
    withdrawal = request(user, "30")

    with pytest.raises(CustodyUnavailable):
        withdrawal_submit(withdrawal_id=withdrawal.pk)

    assert not SimWithdrawal.objects.exists()
    assert balances(user, usdt) == (Decimal(70), Decimal(30))
    assert withdrawal_submit(withdrawal_id=withdrawal.pk).status == WithdrawalStatus.SUBMITTED


def block_withdrawals(user, *, blocked: bool = True) -> None:
    """An operator blocks the user's withdrawals; or one asks to lift the block and another approves."""
    if blocked:
        account_withdrawals_block(user_id=user.id, operator_id=make_blocker().id, blocked=True, reason="taken over")
    else:
        account_withdrawals_unblock(
            user_id=user.id, requested_by_id=make_blocker().id, approver_id=make_blocker().id, reason="all clear"
        )


def test_an_approved_withdrawal_is_not_sent_while_the_account_is_blocked_and_goes_once_unblocked(usdt, user):
    deposit_through_custody(user, usdt, "100")
    withdrawal = request(user, "30")  # approved at once: its submission waits for the worker
    block_withdrawals(user)

    held = withdrawal_submit(withdrawal_id=withdrawal.pk)

    assert (held.status, held.submit_attempts, held.last_error) == (
        WithdrawalStatus.APPROVED,
        0,
        WITHDRAWALS_BLOCKED_HELD,
    )
    assert not SimWithdrawal.objects.exists()  # custody never heard of it
    assert balances(user, usdt) == (Decimal(70), Decimal(30))  # still held
    Withdrawal.objects.filter(pk=withdrawal.pk).update(decided_at=timezone.now() - timedelta(minutes=10))
    assert withdrawals_requeue_submission(older_than=timedelta(minutes=5)) == [withdrawal.pk]  # the sweep retries

    block_withdrawals(user, blocked=False)
    sent = withdrawal_submit(withdrawal_id=withdrawal.pk)

    assert (sent.status, sent.submit_attempts, sent.last_error) == (WithdrawalStatus.SUBMITTED, 1, "")
    assert SimWithdrawal.objects.get().client_reference == str(withdrawal.pk)
    deliver_custody_callbacks()
    assert balances(user, usdt) == (Decimal(70), Decimal(0))
    assert reconcile().ok


def first_submission_unanswered(user, usdt, *, fault: str) -> Withdrawal:
    """An approved withdrawal of 30 USDT (of 100 deposited) whose first submission got no answer: custody took it
    and the answer was lost (``timeout``), or custody never got it (``unavailable``)."""
    deposit_through_custody(user, usdt, "100")
    SimulatedCustody().fault_add(operation="submit", kind=fault, address=DESTINATION)
    withdrawal = request(user, "30")
    with pytest.raises(CustodyUnavailable):
        withdrawal_submit(withdrawal_id=withdrawal.pk)
    return withdrawal


def test_a_withdrawal_custody_got_before_the_block_is_recorded_submitted_and_its_outcome_applied(usdt, user):
    """Custody took it, its answer was lost, then the block: custody sends it whatever we do, so the resubmission
    records it submitted (sending nothing more) and custody's report completes it; the books stay reconciled."""
    withdrawal = first_submission_unanswered(user, usdt, fault="timeout")
    block_withdrawals(user)

    finished = withdrawal_submit(withdrawal_id=withdrawal.pk)

    assert (finished.status, finished.submit_attempts, finished.last_error) == (WithdrawalStatus.SUBMITTED, 1, "")
    assert SimWithdrawal.objects.get().requests == 2  # the same withdrawal, sent once
    deliver_custody_callbacks()
    assert Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.COMPLETED
    assert balances(user, usdt) == (Decimal(70), Decimal(0))
    assert reconcile().ok


def test_a_withdrawal_custody_never_got_is_held_back_by_a_block_even_after_a_failed_attempt(usdt, user):
    withdrawal = first_submission_unanswered(user, usdt, fault="unavailable")
    block_withdrawals(user)

    held = withdrawal_submit(withdrawal_id=withdrawal.pk)

    assert (held.status, held.submit_attempts, held.last_error) == (
        WithdrawalStatus.APPROVED,
        1,
        WITHDRAWALS_BLOCKED_HELD,
    )
    assert not SimWithdrawal.objects.exists()
    assert not held.handed_over  # custody answered it never got it
    assert list(withdrawals_to_decide()) == [held]  # an operator may reject it
    block_withdrawals(user, blocked=False)
    sent = withdrawal_submit(withdrawal_id=withdrawal.pk)
    assert (sent.status, sent.submit_attempts, sent.handed_over) == (WithdrawalStatus.SUBMITTED, 2, True)
    assert SimWithdrawal.objects.get().requests == 1


def test_a_withdrawal_whose_worker_died_before_custody_heard_of_it_can_be_rejected_during_a_block(usdt, user, operator):
    """The claim committed (handed over, counted) and the worker was killed before its custody call."""
    deposit_through_custody(user, usdt, "100")
    withdrawal = request(user, "30")
    Withdrawal.objects.filter(pk=withdrawal.pk).update(submit_attempts=1, handed_over=True)
    block_withdrawals(user)
    with pytest.raises(InvalidState, match="handed to custody"):  # custody may have it: not yet
        withdrawal_reject(withdrawal_id=withdrawal.pk, operator_id=operator.id, reason="stolen account")

    held = withdrawal_submit(withdrawal_id=withdrawal.pk)  # the retry asks custody first

    assert (held.status, held.handed_over, held.last_error) == (
        WithdrawalStatus.APPROVED,
        False,
        WITHDRAWALS_BLOCKED_HELD,
    )
    rejected = withdrawal_reject(withdrawal_id=withdrawal.pk, operator_id=operator.id, reason="stolen account")
    assert (rejected.status, rejected.last_error) == (WithdrawalStatus.REJECTED, "")
    assert balances(user, usdt) == (Decimal(100), Decimal(0))
    assert not SimWithdrawal.objects.exists()
    assert reconcile().ok


def test_a_refused_resubmission_fails_nothing_custody_already_has(usdt, user):
    """Custody took it, its answer was lost, and it refuses the resubmission: the refusal is not believed (custody
    sends it anyway), the hold stays and custody's report completes it."""
    withdrawal = first_submission_unanswered(user, usdt, fault="timeout")
    SimulatedCustody().fault_add(operation="submit", kind="reject", address=DESTINATION)

    resubmitted = withdrawal_submit(withdrawal_id=withdrawal.pk)

    assert resubmitted.status == WithdrawalStatus.SUBMITTED
    assert (
        resubmitted.custody_reference
        == SimulatedCustody().withdrawal_status(withdrawal_id=str(withdrawal.pk)).reference
    )
    assert balances(user, usdt) == (Decimal(70), Decimal(30))
    deliver_custody_callbacks()
    assert Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.COMPLETED
    assert reconcile().ok


def test_an_operator_rejects_a_withdrawal_held_back_by_a_block_and_its_hold_is_released(usdt, user, operator):
    deposit_through_custody(user, usdt, "100")
    withdrawal = request(user, "30")
    block_withdrawals(user)
    withdrawal_submit(withdrawal_id=withdrawal.pk)
    assert list(withdrawals_to_decide()) == [Withdrawal.objects.get(pk=withdrawal.pk)]

    rejected = withdrawal_reject(withdrawal_id=withdrawal.pk, operator_id=operator.id, reason="stolen account")

    assert (rejected.status, rejected.reason, rejected.hold_remaining) == (
        WithdrawalStatus.REJECTED,
        "stolen account",
        Decimal(0),
    )
    assert balances(user, usdt) == (Decimal(100), Decimal(0))
    assert entries(withdrawal) == ["hold", "release"]
    assert not withdrawals_to_decide().exists()
    block_withdrawals(user, blocked=False)
    assert withdrawal_submit(withdrawal_id=withdrawal.pk).status == WithdrawalStatus.REJECTED
    assert not SimWithdrawal.objects.exists()
    assert reconcile().ok


def test_a_withdrawal_handed_to_custody_cannot_be_rejected(usdt, user, operator):
    withdrawal = first_submission_unanswered(user, usdt, fault="timeout")  # custody has it: its outcome is custody's
    block_withdrawals(user)

    with pytest.raises(InvalidState, match="handed to custody"):
        withdrawal_reject(withdrawal_id=withdrawal.pk, operator_id=operator.id, reason="too late")

    assert Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.APPROVED
    assert balances(user, usdt) == (Decimal(70), Decimal(30))
    assert entries(withdrawal) == ["hold"]


def advisory_lock_waiters() -> list[int]:
    """The sessions of this test's database waiting on an advisory lock."""
    return backend_pids("datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'")


@pytest.mark.django_db(transaction=True)
def test_a_block_waits_for_a_withdrawal_under_way_which_is_then_held_back_not_sent(usdt, user):
    """A request that read "not blocked" commits before the block does; its submission then sees the block."""
    fund(user, usdt, "100")
    book_address(user, "USDT", DESTINATION)
    requested, commit = threading.Event(), threading.Event()
    outcome = {}

    def request_then_wait():
        try:
            with transaction.atomic():
                outcome["withdrawal"] = withdrawal_request(
                    user_id=user.id, asset_code="USDT", amount="30", address=DESTINATION
                )
                requested.set()
                commit.wait(timeout=60)
        finally:
            connections.close_all()

    def block():
        try:
            block_withdrawals(user)
            outcome["blocked"] = True
        finally:
            connections.close_all()

    requesting, blocking = threading.Thread(target=request_then_wait), threading.Thread(target=block)
    requesting.start()
    assert requested.wait(timeout=60)
    blocking.start()
    wait_for(advisory_lock_waiters, message="the block to wait for the request under way")
    assert "blocked" not in outcome
    commit.set()
    requesting.join()
    blocking.join()

    assert outcome["blocked"]
    withdrawal = outcome["withdrawal"]
    assert withdrawal.status == WithdrawalStatus.APPROVED
    held = withdrawal_submit(withdrawal_id=withdrawal.pk)
    assert (held.status, held.last_error) == (WithdrawalStatus.APPROVED, WITHDRAWALS_BLOCKED_HELD)
    assert not SimWithdrawal.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_request_waiting_while_a_block_commits_is_refused(usdt, user):
    fund(user, usdt, "100")
    book_address(user, "USDT", DESTINATION)
    blocker = make_blocker()
    outcome = {}

    def request_withdrawal():
        try:
            outcome["withdrawal"] = withdrawal_request(
                user_id=user.id, asset_code="USDT", amount="30", address=DESTINATION
            )
        except WithdrawalsBlocked as exc:
            outcome["refused"] = exc.code
        finally:
            connections.close_all()

    requesting = threading.Thread(target=request_withdrawal)
    with transaction.atomic():
        account_withdrawals_block(user_id=user.id, operator_id=blocker.id, blocked=True, reason="account taken over")
        requesting.start()
        wait_for(advisory_lock_waiters, message="the request to wait for the block")
    requesting.join()

    assert outcome == {"refused": "withdrawals_blocked"}
    assert not Withdrawal.objects.exists()
    assert balances(user, usdt) == (Decimal(100), Decimal(0))


def test_submitting_again_once_submitted_does_nothing(usdt, user):
    deposit_through_custody(user, usdt, "100")
    withdrawal = request(user, "30")
    withdrawal_submit(withdrawal_id=withdrawal.pk)

    again = withdrawal_submit(withdrawal_id=withdrawal.pk)

    assert again.status == WithdrawalStatus.SUBMITTED
    assert SimWithdrawal.objects.get().requests == 1


def test_custody_refusing_the_withdrawal_fails_it_and_releases_the_hold(usdt, user):
    fund(user, usdt, "100")  # credited without custody holding anything: custody refuses to send
    withdrawal = request(user, "30")

    failed = withdrawal_submit(withdrawal_id=withdrawal.pk)

    assert failed.status == WithdrawalStatus.FAILED
    assert "Refused by custody" in failed.reason
    assert balances(user, usdt) == (Decimal(100), Decimal(0))
    assert entries(withdrawal) == ["hold", "release"]


def test_withdrawal_failing_on_chain_is_released_once(usdt, user):
    deposit_through_custody(user, usdt, "100")
    SimulatedCustody().fault_add(operation="outcome", kind="fail", address=DESTINATION)
    withdrawal = request(user, "30")
    withdrawal_submit(withdrawal_id=withdrawal.pk)

    deliver_custody_callbacks()
    deliver_custody_callbacks()

    withdrawal.refresh_from_db()
    assert withdrawal.status == WithdrawalStatus.FAILED
    assert withdrawal.reason == "Custody reported the withdrawal failed."
    assert balances(user, usdt) == (Decimal(100), Decimal(0))
    assert entries(withdrawal) == ["hold", "release"]
    assert reconcile().ok


def test_an_outcome_reported_before_the_submission_is_recorded_waits(usdt, user):
    deposit_through_custody(user, usdt, "100")
    withdrawal = request(user, "30")
    payload = {
        "event_id": "early",
        "type": "withdrawal",
        "withdrawal_id": withdrawal.pk,
        "asset": "USDT",
        "amount": "30",
        "txid": "t-early",
        "status": "completed",
        "network_fee": "0",
    }
    event, _ = custody_event_receive(body=signed(payload)[0])

    with pytest.raises(EventNotReady):
        custody_event_process(event_pk=event.pk)

    assert CustodyEvent.objects.get(pk=event.pk).state == EventState.RECEIVED
    Withdrawal.objects.filter(pk=withdrawal.pk).update(status=WithdrawalStatus.SUBMITTED, submitted_at=timezone.now())
    assert custody_event_process(event_pk=event.pk).state == EventState.PROCESSED
    assert Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.COMPLETED


def test_an_outcome_contradicting_the_withdrawal_is_rejected(usdt, user):
    deposit_through_custody(user, usdt, "100")
    withdrawal = request(user, "30")
    withdrawal_submit(withdrawal_id=withdrawal.pk)
    payload = {
        "event_id": "wrong",
        "type": "withdrawal",
        "withdrawal_id": str(withdrawal.pk),
        "asset": "USDT",
        "amount": "31",
        "txid": "t-wrong",
        "status": "completed",
    }
    event, _ = custody_event_receive(body=signed(payload)[0])

    assert custody_event_process(event_pk=event.pk).state == EventState.REJECTED
    assert Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.SUBMITTED


def test_the_sweep_requeues_approved_withdrawals_left_unsubmitted(usdt, user, django_capture_on_commit_callbacks):
    fund(user, usdt, "100")
    old, recent = request(user, "10"), request(user, "10")
    Withdrawal.objects.filter(pk=old.pk).update(decided_at=timezone.now() - timedelta(minutes=10))

    with django_capture_on_commit_callbacks() as queued:
        assert withdrawals_requeue_submission(older_than=timedelta(minutes=5)) == [old.pk]
    assert len(queued) == 1
    assert withdrawals_requeue_submission(older_than=timedelta(minutes=5)) == []  # not again so soon
    submitted = Withdrawal.objects.filter(pk=recent.pk)
    submitted.update(status=WithdrawalStatus.SUBMITTED, submitted_at=timezone.now())
    assert withdrawals_requeue_submission(older_than=timedelta(0)) == [old.pk]  # a submitted one never
