"""``ledger_transfer_post_v2`` (migration 0008), the one-statement transfer: every refusal of the batch function,
in its precedence, and the database's own checks still run on the rows it writes."""

from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from apps.ledger.amounts import money
from apps.ledger.errors import IdempotencyConflict, InsufficientFunds, InvalidAmount
from apps.ledger.models import AccountKind, EntryReason, JournalEntry, Posting
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import _payload_hash, credit, debit, entry_post, system_account, transfer_create, user_account
from apps.ledger.tests.factories import AssetFactory, UserFactory, fund
from apps.ledger.tests.forgery import ok_but_for_unbacked_recipes
from apps.ledger.tests.threads import run_concurrently


@pytest.fixture
def tether(transactional_db):
    return AssetFactory(code="USDT", name="Tether", decimals=6)


def _transfer(source, destination, amount: str, transfer_id: str, fee: str = "0"):
    return transfer_create(
        source_user_id=source.id,
        destination_user_id=destination.id,
        amount=money(Decimal(amount), "USDT"),
        transfer_id=transfer_id,
        fee=Decimal(fee),
    )


def _call(key: str, source, destination, amount: str, fee: str = "0") -> tuple:
    """``ledger_transfer_post_v2`` called directly, past every check Python makes first."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT status, account_id, balance_before, balance_after FROM ledger_transfer_post_v2("
            " %s, 'USDT', %s, %s, %s::numeric, %s::numeric, 0, %s, %s, '{}', '{\"legs\": ', '}', NULL, %s, false)",
            [key, source.id, destination.id, amount, fee, [amount, amount, fee], key, timezone.now()],
        )
        return cursor.fetchone()


def test_an_autocommit_transfer_with_a_fee_writes_three_postings_chained_balances_and_the_python_hash(tether):
    alice, bob = UserFactory(), UserFactory()
    fund(alice, tether, "10")
    _transfer(alice, bob, "1", "warm-up", fee="0.5")  # creates bob's and the fee shard's accounts (the long way)

    entry = _transfer(alice, bob, "2.25", "fee-1", fee="0.125")

    fee_account = system_account(AccountKind.FEE_REVENUE, tether, shard_key="transfer:fee-1")
    source, destination = user_account(alice.id, tether), user_account(bob.id, tether)
    postings = list(Posting.objects.filter(entry_id=entry.id).order_by("id").values_list("account_id", "amount"))
    assert postings == [
        (source.id, Decimal("2.375")),
        (destination.id, Decimal("-2.25")),
        (fee_account.id, Decimal("-0.125")),
    ]
    legs = [
        debit(source, Decimal("2.375")),
        credit(destination, Decimal("2.25")),
        credit(fee_account, Decimal("0.125")),
    ]
    assert JournalEntry.objects.get(id=entry.id).payload_hash == _payload_hash(
        EntryReason.TRANSFER, "transfer", "fee-1", legs
    )
    for account in (source, destination, fee_account):
        last = Posting.objects.filter(account_id=account.id).order_by("id").last()
        assert last is not None and last.balance_after == account.balance
    assert (source.balance, destination.balance) == (Decimal("6.125"), Decimal("3.25"))
    assert (source.version, destination.version) == (3, 2)  # the funding, then one per entry
    assert ok_but_for_unbacked_recipes(reconcile())  # transfers: no business record by design


def test_a_replayed_key_wins_over_short_funds_same_payload_replays_another_conflicts(tether):
    alice, bob = UserFactory(), UserFactory()
    fund(alice, tether, "5")
    _transfer(alice, bob, "1", "warm-up")
    first = _transfer(alice, bob, "4", "r-1")  # alice has nothing left: the balance check would now refuse it

    again = _transfer(alice, bob, "4", "r-1")
    assert (again.id, again.created_at, again.payload_hash) == (first.id, first.created_at, first.payload_hash)
    with pytest.raises(IdempotencyConflict):
        _transfer(alice, bob, "3", "r-1")
    with pytest.raises(InsufficientFunds, match="Insufficient USDT: 0.000000 available, 3.000000 needed."):
        _transfer(alice, bob, "3", "r-2")
    assert JournalEntry.objects.filter(reason=EntryReason.TRANSFER).count() == 2
    assert user_account(alice.id, tether).balance == 0
    assert ok_but_for_unbacked_recipes(reconcile())  # transfers: no business record by design


def test_a_balance_reaching_10_to_the_20_is_refused_and_writes_nothing(tether):
    alice, bob = UserFactory(), UserFactory()
    fund(bob, tether, str(Decimal(10) ** 20 - 2))
    with transaction.atomic():  # not from equity, whose balance would reach 10^20 first
        entry_post(
            idempotency_key="funding:alice",
            reason=EntryReason.ADJUSTMENT,
            legs=[
                debit(system_account(AccountKind.CUSTODY, tether), Decimal(2)),
                credit(user_account(alice.id, tether), Decimal(2)),
            ],
        )
    with pytest.raises(InvalidAmount, match="The USDT user_available balance would reach 10\\^20 or more."):
        _transfer(alice, bob, "2", "big")
    assert not JournalEntry.objects.filter(idempotency_key="transfer:big").exists()


def test_called_directly_an_overdrawn_destination_is_insufficient_and_a_zero_leg_is_refused_by_the_database(tether):
    # Python never sends a negative or zero amount; the function and the database refuse them anyway.
    alice, bob = UserFactory(), UserFactory()
    fund(alice, tether, "5")
    fund(bob, tether, "1")
    destination = user_account(bob.id, tether)

    assert _call("transfer:negative", alice, bob, "-2") == ("insufficient", destination.id, Decimal(1), Decimal(-1))
    with pytest.raises(IntegrityError, match="posting_amount_not_zero"), transaction.atomic():
        _call("transfer:zero", alice, bob, "0")
    assert not JournalEntry.objects.filter(idempotency_key__in=["transfer:negative", "transfer:zero"]).exists()
    assert (user_account(alice.id, tether).balance, destination.balance) == (Decimal(5), Decimal(1))


def test_called_directly_with_one_user_on_both_sides_the_function_refuses_and_writes_nothing(tether):
    # Migration 0012: before it, both postings went to one account and its stored balance fell by the amount.
    alice = UserFactory()
    fund(alice, tether, "5")

    with pytest.raises(IntegrityError, match="source and destination are one user"), transaction.atomic():
        _call("transfer:self", alice, alice, "1")

    assert not JournalEntry.objects.filter(idempotency_key="transfer:self").exists()
    assert user_account(alice.id, tether).balance == Decimal(5)
    assert ok_but_for_unbacked_recipes(reconcile())  # transfers: no business record by design


def test_concurrent_transfers_of_one_key_post_once_and_another_payload_is_a_conflict(tether):
    # The key is taken by INSERT ... ON CONFLICT DO NOTHING, which waits for a concurrent holder of the key.
    alice, bob = UserFactory(), UserFactory()
    fund(alice, tether, "100")
    _transfer(alice, bob, "1", "warm-up")
    calls = [lambda amount=amount: _transfer(alice, bob, amount, "same") for amount in ["2"] * 7 + ["3"]]

    results = run_concurrently(calls)

    entries = [r for r in results if isinstance(r, JournalEntry)]
    assert all(isinstance(r, (JournalEntry, IdempotencyConflict)) for r in results), results
    assert len({entry.id for entry in entries}) == 1
    posted = JournalEntry.objects.get(idempotency_key="transfer:same")
    amount = -Posting.objects.get(entry=posted, account__owner=bob).amount
    assert len(entries) == (7 if amount == 2 else 1)
    assert user_account(alice.id, tether).balance == Decimal(99) - amount
    assert ok_but_for_unbacked_recipes(reconcile())  # transfers: no business record by design
