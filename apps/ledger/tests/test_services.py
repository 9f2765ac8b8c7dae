from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from apps.core.errors import DomainError
from apps.ledger.amounts import format_amount, money
from apps.ledger.errors import IdempotencyConflict, InsufficientFunds, InvalidAmount, UnbalancedEntry
from apps.ledger.models import Account, AccountKind, EntryReason, JournalEntry, Posting
from apps.ledger.selectors import balances_for_user
from apps.ledger.services import (
    EntryRequest,
    Leg,
    adjustment_post,
    asset_register,
    credit,
    debit,
    entries_post,
    entry_post,
    funds_hold,
    funds_release,
    hold_legs,
    release_legs,
    system_account,
    transfer_create,
    user_account,
    user_accounts,
)
from apps.ledger.tests.factories import UserFactory, fund


def balance_of(user, asset):
    return next(b for b in balances_for_user(user.id) if b.asset == asset.code)


def test_entry_post_writes_postings_with_balance_after_and_updates_balances(db, usdt, user):
    custody = system_account(AccountKind.CUSTODY, usdt)
    available = user_account(user.id, usdt)
    with transaction.atomic():
        entry = entry_post(
            idempotency_key="deposit:simnet:tx1:0",
            reason=EntryReason.DEPOSIT,
            legs=[debit(custody, Decimal("10")), credit(available, Decimal("10"))],
            reference_type="deposit",
            reference_id="1",
        )
    postings = {p.account_id: p for p in Posting.objects.filter(entry_id=entry.id)}
    assert postings[custody.id].amount == Decimal("10")
    assert postings[custody.id].balance_after == Decimal("10")
    assert postings[available.id].amount == Decimal("-10")
    assert postings[available.id].balance_after == Decimal("10")
    custody.refresh_from_db()
    available.refresh_from_db()
    assert (custody.balance, custody.version) == (Decimal("10"), 1)
    assert (available.balance, available.version) == (Decimal("10"), 1)


def test_entry_post_outside_a_transaction_is_refused(transactional_db, usdt, user):
    with pytest.raises(TransactionManagementError):
        entry_post(
            idempotency_key="k",
            reason=EntryReason.DEPOSIT,
            legs=[
                debit(system_account(AccountKind.CUSTODY, usdt), Decimal(1)),
                credit(user_account(user.id, usdt), Decimal(1)),
            ],
        )


def test_unbalanced_legs_are_refused_before_anything_is_written(db, usdt, user):
    custody = system_account(AccountKind.CUSTODY, usdt)
    available = user_account(user.id, usdt)
    with pytest.raises(UnbalancedEntry), transaction.atomic():
        entry_post(
            idempotency_key="k",
            reason=EntryReason.DEPOSIT,
            legs=[debit(custody, Decimal(2)), credit(available, Decimal(1))],
        )
    with pytest.raises(UnbalancedEntry), transaction.atomic():
        entry_post(idempotency_key="k", reason=EntryReason.DEPOSIT, legs=[debit(custody, Decimal(2))])
    assert not JournalEntry.objects.exists()


def test_legs_finer_than_the_asset_precision_are_refused(db, usdt, user):
    custody = system_account(AccountKind.CUSTODY, usdt)
    available = user_account(user.id, usdt)
    dust = Decimal("0.0000001")
    with pytest.raises(InvalidAmount), transaction.atomic():
        entry_post(
            idempotency_key="k", reason=EntryReason.DEPOSIT, legs=[debit(custody, dust), credit(available, dust)]
        )
    assert not JournalEntry.objects.exists()


def test_replay_with_the_same_payload_returns_the_original_entry(db, usdt, user):
    fund(user, usdt, "100")
    first = funds_hold(user_id=user.id, asset=usdt, amount=Decimal("60"), idempotency_key="order:1:hold")
    again = funds_hold(user_id=user.id, asset=usdt, amount=Decimal("60"), idempotency_key="order:1:hold")

    assert again.id == first.id
    assert JournalEntry.objects.filter(idempotency_key="order:1:hold").count() == 1
    assert balance_of(user, usdt).available == Decimal("40")
    assert balance_of(user, usdt).held == Decimal("60")


def test_replay_is_recognised_even_when_funds_are_now_short(db, usdt, user):
    """The second hold of 60 from 100 would be insufficient, but it is a replay: the original comes back."""
    fund(user, usdt, "100")
    first = funds_hold(user_id=user.id, asset=usdt, amount=Decimal("60"), idempotency_key="withdrawal:9:hold")
    again = funds_hold(user_id=user.id, asset=usdt, amount=Decimal("60"), idempotency_key="withdrawal:9:hold")
    assert again.id == first.id


def test_replay_with_a_different_payload_is_a_conflict(db, usdt, user):
    fund(user, usdt, "100")
    funds_hold(user_id=user.id, asset=usdt, amount=Decimal("60"), idempotency_key="order:1:hold")

    with pytest.raises(IdempotencyConflict):
        funds_hold(user_id=user.id, asset=usdt, amount=Decimal("50"), idempotency_key="order:1:hold")
    assert balance_of(user, usdt).held == Decimal("60")


def test_hold_more_than_available_is_insufficient_funds_and_writes_nothing(db, usdt, user):
    fund(user, usdt, "100")
    with pytest.raises(InsufficientFunds, match="Insufficient USDT"):
        funds_hold(user_id=user.id, asset=usdt, amount=Decimal("100.000001"), idempotency_key="order:2:hold")
    assert balance_of(user, usdt).available == Decimal("100")
    assert not JournalEntry.objects.filter(idempotency_key="order:2:hold").exists()


def test_hold_then_release_returns_funds_to_available(db, usdt, user):
    fund(user, usdt, "100")
    funds_hold(user_id=user.id, asset=usdt, amount=Decimal("30"), idempotency_key="order:3:hold")
    funds_release(user_id=user.id, asset=usdt, amount=Decimal("30"), idempotency_key="order:3:release")
    balance = balance_of(user, usdt)
    assert (balance.available, balance.held, balance.total) == (Decimal("100"), Decimal("0"), Decimal("100"))


def test_releasing_more_than_held_is_refused(db, usdt, user):
    fund(user, usdt, "100")
    funds_hold(user_id=user.id, asset=usdt, amount=Decimal("30"), idempotency_key="order:4:hold")
    with pytest.raises(InsufficientFunds):
        funds_release(user_id=user.id, asset=usdt, amount=Decimal("31"), idempotency_key="order:4:release")


def test_transfer_moves_available_funds_between_users(db, usdt):
    alice, bob = UserFactory(), UserFactory()
    fund(alice, usdt, "10")
    entry = transfer_create(
        source_user_id=alice.id, destination_user_id=bob.id, amount=money(Decimal("2.5"), "USDT"), transfer_id="t-1"
    )
    assert entry.reason == EntryReason.TRANSFER
    assert balance_of(alice, usdt).available == Decimal("7.5")
    assert balance_of(bob, usdt).available == Decimal("2.5")


def test_transfer_with_a_fee_credits_fee_revenue(db, usdt):
    alice, bob = UserFactory(), UserFactory()
    fund(alice, usdt, "10")
    transfer_create(
        source_user_id=alice.id,
        destination_user_id=bob.id,
        amount=money(Decimal("2"), "USDT"),
        transfer_id="t-2",
        fee=Decimal("0.01"),
    )
    fee_revenue = Account.objects.get(kind=AccountKind.FEE_REVENUE, asset=usdt)
    assert balance_of(alice, usdt).available == Decimal("7.99")
    assert balance_of(bob, usdt).available == Decimal("2")
    assert fee_revenue.balance == Decimal("0.01")


@pytest.mark.parametrize(
    ("transfer_id", "fee"),
    [("t-3", Decimal(0)), ("t-4", Decimal("0.010000")), ('q"uo\\te \u00e9\u4e2d', Decimal("0.5"))],
)
def test_transfer_payload_hash_is_the_one_entry_post_computes(db, usdt, settings, transfer_id, fee):
    # transfer_create hashes its payload in the database (ledger_transfer_post_v2); an entry posted by
    # entry_post under the same key with the same legs must replay it, not conflict.
    settings.LEDGER_FEE_REVENUE_SHARDS = 3
    alice, bob = UserFactory(), UserFactory()
    fund(alice, usdt, "1000")
    amount = Decimal("100.000000")
    entry = transfer_create(
        source_user_id=alice.id,
        destination_user_id=bob.id,
        amount=money(amount, "USDT"),
        transfer_id=transfer_id,
        fee=fee,
    )
    stored = JournalEntry.objects.get(id=entry.id)
    assert entry.payload_hash == stored.payload_hash
    legs = [debit(user_account(alice.id, usdt), amount + fee), credit(user_account(bob.id, usdt), amount)]
    if fee:
        fee_account = system_account(AccountKind.FEE_REVENUE, usdt, shard_key=f"transfer:{transfer_id}")
        legs.append(credit(fee_account, fee))
        assert Posting.objects.get(entry=stored, account=fee_account).amount == -fee
    with transaction.atomic():
        replayed = entry_post(
            idempotency_key=f"transfer:{transfer_id}",
            reason=EntryReason.TRANSFER,
            legs=legs,
            reference_type="transfer",
            reference_id=transfer_id,
        )
    assert replayed.id == entry.id


def test_transfer_replay_returns_the_original_and_another_amount_is_a_conflict(db, usdt):
    alice, bob = UserFactory(), UserFactory()
    fund(alice, usdt, "10")
    first = transfer_create(
        source_user_id=alice.id, destination_user_id=bob.id, amount=money(Decimal(1), "USDT"), transfer_id="t-5"
    )
    again = transfer_create(
        source_user_id=alice.id, destination_user_id=bob.id, amount=money(Decimal(1), "USDT"), transfer_id="t-5"
    )
    assert (again.id, again.created_at) == (first.id, first.created_at)
    with pytest.raises(IdempotencyConflict):
        transfer_create(
            source_user_id=alice.id, destination_user_id=bob.id, amount=money(Decimal(2), "USDT"), transfer_id="t-5"
        )
    assert balance_of(alice, usdt).available == Decimal(9)


@pytest.mark.parametrize(
    ("amount", "fee", "field", "message"),
    [
        ("1.0000001", "0", "amount", "At most 6 decimal places are allowed."),
        ("1", "0.0000001", "fee", "At most 6 decimal places are allowed."),
        ("1e-19", "0", "amount", "At most 6 decimal places are allowed."),
        ("-1", "0", "amount", "Must be positive."),
        ("1", "-1", "fee", "Must be positive."),
        ("0", "0", "amount", "Must be greater than zero."),
    ],
)
def test_transfer_amounts_are_checked_against_the_asset(db, usdt, amount, fee, field, message):
    alice, bob = UserFactory(), UserFactory()
    fund(alice, usdt, "10")
    with pytest.raises(InvalidAmount) as error:
        transfer_create(
            source_user_id=alice.id,
            destination_user_id=bob.id,
            amount=money(Decimal(amount), "USDT"),
            transfer_id="t-6",
            fee=Decimal(fee),
        )
    assert error.value.fields == {field: message}
    assert not JournalEntry.objects.filter(idempotency_key="transfer:t-6").exists()


def test_transfer_without_funds_is_insufficient_and_writes_nothing(db, usdt):
    alice, bob = UserFactory(), UserFactory()
    with pytest.raises(InsufficientFunds, match="Insufficient USDT: 0.000000 available, 1.000000 needed."):
        transfer_create(
            source_user_id=alice.id, destination_user_id=bob.id, amount=money(Decimal(1), "USDT"), transfer_id="t-7"
        )
    assert not Account.objects.filter(owner__in=[alice, bob]).exists()


def test_transfer_to_oneself_is_refused(db, usdt, user):
    with pytest.raises(DomainError) as error:
        transfer_create(
            source_user_id=user.id, destination_user_id=user.id, amount=money(Decimal(1), "USDT"), transfer_id="t"
        )
    assert "destination" in error.value.fields


def test_transfer_of_an_unknown_asset_is_refused(db, user):
    other = UserFactory()
    with pytest.raises(InvalidAmount) as error:
        transfer_create(
            source_user_id=user.id, destination_user_id=other.id, amount=money(Decimal(1), "DOGE"), transfer_id="t"
        )
    assert error.value.fields == {"asset": "Unknown asset DOGE."}


def test_adjustment_needs_an_equity_leg_and_a_memo(db, usdt, user):
    operator = UserFactory(is_staff=True)
    equity = system_account(AccountKind.EQUITY, usdt)
    available = user_account(user.id, usdt)
    custody = system_account(AccountKind.CUSTODY, usdt)
    with pytest.raises(UnbalancedEntry, match="equity"):
        adjustment_post(
            adjustment_id="a1",
            legs=[debit(custody, Decimal(1)), credit(available, Decimal(1))],
            memo="x",
            operator_id=operator.id,
        )
    with pytest.raises(DomainError) as error:
        adjustment_post(
            adjustment_id="a1",
            legs=[debit(equity, Decimal(1)), credit(available, Decimal(1))],
            memo="  ",
            operator_id=operator.id,
        )
    assert "memo" in error.value.fields

    entry = adjustment_post(
        adjustment_id="a1",
        legs=[debit(equity, Decimal(1)), credit(available, Decimal(1))],
        memo="goodwill credit, ticket 42",
        operator_id=operator.id,
    )
    stored = JournalEntry.objects.get(id=entry.id)
    assert stored.created_by_id == operator.id
    assert stored.metadata == {"memo": "goodwill credit, ticket 42"}
    assert balance_of(user, usdt).available == Decimal(1)


def test_fee_revenue_shard_is_chosen_by_key_so_replays_match(db, usdt, settings):
    settings.LEDGER_FEE_REVENUE_SHARDS = 4
    first = system_account(AccountKind.FEE_REVENUE, usdt, shard_key="trade:abc")
    again = system_account(AccountKind.FEE_REVENUE, usdt, shard_key="trade:abc")
    shards = {system_account(AccountKind.FEE_REVENUE, usdt, shard_key=f"trade:{n}").shard for n in range(40)}
    assert first.id == again.id
    assert shards == {0, 1, 2, 3}


def test_user_accounts_are_created_once(db, usdt, user):
    available, held = user_accounts(user.id, usdt)
    assert (available.kind, held.kind) == (AccountKind.USER_AVAILABLE, AccountKind.USER_HELD)
    assert user_accounts(user.id, usdt) == (available, held)
    assert Account.objects.filter(owner=user).count() == 2


def test_s6_no_float_drift(db, btc, user):
    """SCENARIOS.md S6: deposits of 0.1 and 0.2 BTC, then a completed withdrawal of 0.3 BTC (fee 0)."""
    custody = system_account(AccountKind.CUSTODY, btc)
    available, held = user_accounts(user.id, btc)
    with transaction.atomic():
        for n, amount in enumerate(["0.1", "0.2"]):
            entry_post(
                idempotency_key=f"deposit:simnet:tx{n}:0",
                reason=EntryReason.DEPOSIT,
                legs=[debit(custody, Decimal(amount)), credit(available, Decimal(amount))],
            )
    funds_hold(
        user_id=user.id,
        asset=btc,
        amount=Decimal("0.3"),
        idempotency_key="withdrawal:1:hold",
        reason=EntryReason.WITHDRAWAL_HOLD,
    )
    with transaction.atomic():
        entry_post(
            idempotency_key="withdrawal:1:complete",
            reason=EntryReason.WITHDRAWAL_COMPLETE,
            legs=[debit(held, Decimal("0.3")), credit(custody, Decimal("0.3"))],
        )
    balance = balance_of(user, btc)
    assert balance.available == Decimal("0")
    assert format_amount(balance.available, 8) == "0.00000000"
    assert balance.held == Decimal("0")
    custody.refresh_from_db()
    assert custody.balance == Decimal("0")


def test_leg_constructors_sign_debits_positive_and_credits_negative(db, usdt):
    account = system_account(AccountKind.CUSTODY, usdt)
    assert debit(account, Decimal(3)) == Leg(account.id, Decimal(3))
    assert credit(account, Decimal(3)) == Leg(account.id, Decimal(-3))


def test_a_balance_that_would_reach_10_20_is_refused_before_anything_is_written(db, usdt, user):
    fund(user, usdt, "99999999999999999999")
    custody = system_account(AccountKind.CUSTODY, usdt)
    with pytest.raises(InvalidAmount, match="10\\^20"), transaction.atomic():
        entry_post(
            idempotency_key="deposit:simnet:big:0",
            reason=EntryReason.DEPOSIT,
            legs=[debit(custody, Decimal(1)), credit(user_account(user.id, usdt), Decimal(1))],
        )
    assert not JournalEntry.objects.filter(idempotency_key="deposit:simnet:big:0").exists()


def test_entries_post_writes_each_entry_in_order_and_replays_return_the_originals(db, usdt, user):
    custody = system_account(AccountKind.CUSTODY, usdt)
    available, held = user_accounts(user.id, usdt)
    batch = [
        EntryRequest(
            idempotency_key="deposit:batch:1",
            reason=EntryReason.DEPOSIT,
            legs=[debit(custody, Decimal("7")), credit(available, Decimal("7"))],
        ),
        EntryRequest(
            idempotency_key="hold:batch:1",
            reason=EntryReason.HOLD,
            legs=hold_legs(available_id=available.id, held_id=held.id, amount=Decimal("3")),
        ),
    ]
    with transaction.atomic():
        first = entries_post(batch)
    with transaction.atomic():
        again = entries_post(batch)
    assert [entry.idempotency_key for entry in first] == ["deposit:batch:1", "hold:batch:1"]
    assert [entry.id for entry in again] == [entry.id for entry in first]
    assert balance_of(user, usdt).available == Decimal("4")
    assert balance_of(user, usdt).held == Decimal("3")


def test_entries_post_raises_the_first_failure_and_the_transaction_writes_nothing(db, usdt, user):
    available, held = user_accounts(user.id, usdt)
    fund(user, usdt, "5")
    before = JournalEntry.objects.count()
    batch = [
        EntryRequest(
            idempotency_key=f"hold:short:{n}",
            reason=EntryReason.HOLD,
            legs=hold_legs(available_id=available.id, held_id=held.id, amount=Decimal("4")),
        )
        for n in range(2)
    ]
    with pytest.raises(InsufficientFunds), transaction.atomic():
        entries_post(batch)
    assert JournalEntry.objects.count() == before
    assert balance_of(user, usdt).available == Decimal("5")


def test_release_legs_undo_hold_legs(db, usdt, user):
    hold = hold_legs(available_id=1, held_id=2, amount=Decimal("2"))
    release = release_legs(held_id=2, available_id=1, amount=Decimal("2"))
    assert hold == [Leg(1, Decimal("2")), Leg(2, Decimal("-2"))]
    assert sorted(hold + release, key=lambda leg: leg.account_id) == [
        Leg(1, Decimal("2")),
        Leg(1, Decimal("-2")),
        Leg(2, Decimal("-2")),
        Leg(2, Decimal("2")),
    ]


def test_asset_register_creates_once_and_leaves_an_existing_asset_unchanged(db):
    first = asset_register(code="DOGE", name="Dogecoin", decimals=8, display_decimals=4, network="simnet")
    again = asset_register(code="DOGE", name="Renamed", decimals=2)
    assert again.id == first.id
    assert (again.name, again.decimals, again.display_decimals) == ("Dogecoin", 8, 4)


def test_a_transfer_outside_a_transaction_is_one_statement_and_a_refused_one_leaves_nothing(transactional_db):
    # Outside any transaction transfer_create posts in one autocommit statement; an account to create
    # first, or an error to word, goes through the retried transaction instead, with the same outcomes.
    from apps.ledger.tests.factories import AssetFactory

    usdt = AssetFactory(code="USDT", name="Tether", decimals=6)
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    fund(alice, usdt, "10")
    first = transfer_create(
        source_user_id=alice.id, destination_user_id=bob.id, amount=money(Decimal(3), "USDT"), transfer_id="a-1"
    )  # bob's account is created first (the long way)
    with CaptureQueriesContext(connection) as captured:
        second = transfer_create(
            source_user_id=bob.id, destination_user_id=alice.id, amount=money(Decimal(1), "USDT"), transfer_id="a-2"
        )
    assert len(captured.captured_queries) == 0  # nothing through Django's cursor: one prepared statement
    assert JournalEntry.objects.get(id=second.id).payload_hash == second.payload_hash
    again = transfer_create(
        source_user_id=bob.id, destination_user_id=alice.id, amount=money(Decimal(1), "USDT"), transfer_id="a-2"
    )
    assert (again.id, again.created_at) == (second.id, second.created_at)
    with pytest.raises(IdempotencyConflict):
        transfer_create(
            source_user_id=alice.id, destination_user_id=bob.id, amount=money(Decimal(2), "USDT"), transfer_id="a-1"
        )
    with pytest.raises(InsufficientFunds, match="Insufficient USDT: 2.000000 available, 5.000000 needed."):
        transfer_create(
            source_user_id=bob.id, destination_user_id=alice.id, amount=money(Decimal(5), "USDT"), transfer_id="a-3"
        )
    with pytest.raises(InsufficientFunds):
        transfer_create(
            source_user_id=carol.id, destination_user_id=alice.id, amount=money(Decimal(1), "USDT"), transfer_id="a-4"
        )
    with pytest.raises(InvalidAmount) as error:
        transfer_create(
            source_user_id=alice.id, destination_user_id=bob.id, amount=money(Decimal("0.1234567"), "USDT"),
            transfer_id="a-5",
        )  # fmt: skip
    assert error.value.fields == {"amount": "At most 6 decimal places are allowed."}
    assert not Account.objects.filter(owner=carol).exists()
    assert set(JournalEntry.objects.filter(reason=EntryReason.TRANSFER).values_list("id", flat=True)) == {
        first.id,
        second.id,
    }
    assert (balance_of(alice, usdt).available, balance_of(bob, usdt).available) == (Decimal(8), Decimal(2))
