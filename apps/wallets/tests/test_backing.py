"""Reconciliation's backing rule for deposits and withdrawals (invariant 8): every entry of a deposit or withdrawal
reason is the entry its deposit or withdrawal's recipe posted."""

import pytest

from apps.ledger.models import AccountKind, EntryReason, JournalEntry
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import credit, debit, system_account, user_account
from apps.ledger.tests.factories import UserFactory, fund
from apps.ledger.tests.forgery import (
    available_to_held,
    backing_failures,
    flagged_entries,
    forge,
    system_to_system,
    system_to_user,
    user_to_user,
)
from apps.wallets.custody.simnet import new_address
from apps.wallets.models import Deposit, WithdrawalStatus
from apps.wallets.services import withdrawal_cancel, withdrawal_request

from .factories import book_address
from .test_reconcile import busy_exchange  # noqa: F401  (the fixture)


@pytest.fixture
def wallets(busy_exchange, user, usdt):  # noqa: F811
    """``busy_exchange`` plus a cancelled withdrawal and a second user holding funds."""
    address = book_address(user, usdt, new_address()).address
    cancelled = withdrawal_request(user_id=user.id, asset_code="USDT", amount="150", address=address)  # awaits approval
    withdrawal_cancel(withdrawal_id=cancelled.pk, user_id=user.id)
    other = UserFactory()
    fund(other, usdt, "100")
    return {**busy_exchange, "cancelled": cancelled, "other": other, "deposit": Deposit.objects.order_by("id")[0]}


def test_deposits_and_withdrawals_ending_every_way_are_backed(wallets):
    assert backing_failures(reconcile()) == {}


def test_a_forged_deposit_with_a_made_up_transaction_is_flagged(wallets, user, usdt):
    entry = forge(
        reason=EntryReason.DEPOSIT,
        legs=system_to_user(AccountKind.CUSTODY, user, usdt, "500"),
        idempotency_key="deposit:simnet:f00d:0",
        reference_type="deposit",
        reference_id="424242",
    )

    assert flagged_entries(reconcile()) == {entry.id: "no deposit is credited by this entry"}


def test_a_second_credit_reusing_a_real_deposits_reference_is_flagged(wallets, user, usdt):
    deposit = wallets["deposit"]
    entry = forge(
        reason=EntryReason.DEPOSIT,
        legs=system_to_user(AccountKind.CUSTODY, user, deposit.asset, str(deposit.amount)),
        reference_type="deposit",
        reference_id=str(deposit.id),
    )

    failures = backing_failures(reconcile())

    assert failures == {
        "wallet_entries_backed": [
            {
                "entry": entry.id,
                "idempotency_key": entry.idempotency_key,
                "reason": "deposit",
                "reference_type": "deposit",
                "reference_id": str(deposit.id),
                "problem": "no deposit is credited by this entry",
            }
        ]
    }


def test_a_withdrawal_hold_of_a_made_up_withdrawal_is_flagged(wallets, user, usdt):
    entry = forge(
        reason=EntryReason.WITHDRAWAL_HOLD,
        legs=available_to_held(user, usdt, "5"),
        idempotency_key="withdrawal:777777:hold",
        reference_type="withdrawal",
        reference_id="777777",
    )

    assert flagged_entries(reconcile()) == {entry.id: "no such withdrawal"}


def test_a_second_hold_of_a_real_withdrawal_under_a_new_key_is_flagged(wallets, user, usdt):
    awaiting = wallets["awaiting"]
    entry = forge(
        reason=EntryReason.WITHDRAWAL_HOLD,
        legs=available_to_held(user, usdt, str(awaiting.total)),
        reference_type="withdrawal",
        reference_id=str(awaiting.pk),
    )

    assert flagged_entries(reconcile()) == {entry.id: "not the key or reference of its withdrawal's step"}


def test_a_completion_of_a_withdrawal_awaiting_approval_is_flagged(wallets, user, usdt):
    awaiting = wallets["awaiting"]
    held = user_account(user.id, usdt, AccountKind.USER_HELD)
    entry = forge(
        reason=EntryReason.WITHDRAWAL_COMPLETE,
        legs=[
            debit(held, awaiting.total),
            credit(system_account(AccountKind.CUSTODY, usdt), awaiting.amount),
            credit(system_account(AccountKind.FEE_REVENUE, usdt, shard_key=awaiting.key("complete")), awaiting.fee),
        ],
        idempotency_key=awaiting.key("complete"),
        reference_type="withdrawal",
        reference_id=str(awaiting.pk),
    )

    assert flagged_entries(reconcile()) == {entry.id: "its withdrawal is awaiting_approval"}


def test_a_release_of_a_completed_withdrawal_is_flagged(wallets, user, usdt):
    completed = wallets["completed"]
    entry = forge(
        reason=EntryReason.WITHDRAWAL_RELEASE,
        legs=user_to_user(wallets["other"], user, usdt, str(completed.total)),
        idempotency_key=completed.key("release"),
        reference_type="withdrawal",
        reference_id=str(completed.pk),
    )

    assert flagged_entries(reconcile()) == {entry.id: "its withdrawal is completed"}


def test_a_network_fee_of_a_cancelled_withdrawal_is_flagged(wallets, usdt):
    cancelled = wallets["cancelled"]
    entry = forge(
        reason=EntryReason.NETWORK_FEE,
        legs=system_to_system(AccountKind.NETWORK_FEE_EXPENSE, AccountKind.CUSTODY, usdt, "1"),
        idempotency_key=cancelled.key("network-fee"),
        reference_type="withdrawal",
        reference_id=str(cancelled.pk),
    )

    assert flagged_entries(reconcile()) == {entry.id: "its withdrawal is cancelled"}


def test_a_release_of_a_pending_withdrawal_paid_to_another_user_is_flagged(wallets, user, usdt):
    """The approved withdrawal's release key is free while it is pending: a forgery under it is flagged (its
    state), whatever its legs."""
    approved = wallets["approved"]
    assert approved.status in (WithdrawalStatus.APPROVED, WithdrawalStatus.SUBMITTED, WithdrawalStatus.REQUESTED)
    held = user_account(user.id, usdt, AccountKind.USER_HELD)
    entry = forge(
        reason=EntryReason.WITHDRAWAL_RELEASE,
        legs=[debit(held, approved.total), credit(user_account(wallets["other"].id, usdt), approved.total)],
        idempotency_key=approved.key("release"),
        reference_type="withdrawal",
        reference_id=str(approved.pk),
    )

    (problem,) = flagged_entries(reconcile()).values()
    assert problem.startswith("its withdrawal is ")
    assert JournalEntry.objects.filter(id=entry.id).exists()


def test_a_withdrawal_whose_record_changed_after_its_hold_is_flagged(wallets):
    """The recipe's amounts are the withdrawal's: a withdrawal row whose amount was changed behind the ledger no
    longer matches its hold entry's postings."""
    awaiting = wallets["awaiting"]
    type(awaiting).objects.filter(pk=awaiting.pk).update(amount=awaiting.amount - 1, hold_remaining=awaiting.total - 1)
    hold = JournalEntry.objects.get(idempotency_key=awaiting.key("hold"))

    assert flagged_entries(reconcile()) == {hold.id: "a posting is not its recipe's leg"}


def test_a_filtered_report_looks_at_the_entries_of_its_assets(wallets, user, usdt):
    entry = forge(
        reason=EntryReason.DEPOSIT,
        legs=system_to_user(AccountKind.CUSTODY, user, usdt, "1"),
        reference_type="deposit",
        reference_id="1",
    )

    assert flagged_entries(reconcile(asset_code="USDT")) == {entry.id: "no deposit is credited by this entry"}
    assert flagged_entries(reconcile(asset_code="BTC")) == {}
