"""``entries_post`` / ``entry_post`` through ``ledger_post_entries_v2``: errors, replays, chained balances, threads."""

import random
import time
import uuid
from decimal import Decimal

import psycopg
import pytest
from django.db import connection, transaction

from apps.core.errors import NotFound
from apps.ledger.errors import IdempotencyConflict, InsufficientFunds, InvalidAmount, UnbalancedEntry
from apps.ledger.models import Account, AccountKind, EntryReason, JournalEntry, Posting
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import (
    EntryRequest,
    Leg,
    credit,
    debit,
    entries_post,
    entry_ids_post,
    entry_ids_posting,
    entry_post,
    hold_legs,
    release_legs,
    system_account,
    user_account,
    user_accounts,
)
from apps.ledger.tests.factories import UserFactory, fund
from apps.ledger.tests.forgery import ok_but_for_unbacked_recipes
from apps.ledger.tests.threads import run_concurrently
from apps.ledger.transactions import retrying_atomic


def _hold(key: str, available: Account, held: Account, amount: str) -> EntryRequest:
    return EntryRequest(
        idempotency_key=key,
        reason=EntryReason.HOLD,
        legs=hold_legs(available_id=available.id, held_id=held.id, amount=Decimal(amount)),
    )


def _release(key: str, available: Account, held: Account, amount: str) -> EntryRequest:
    return EntryRequest(
        idempotency_key=key,
        reason=EntryReason.RELEASE,
        legs=release_legs(held_id=held.id, available_id=available.id, amount=Decimal(amount)),
    )


def _journal() -> tuple[int, int, list]:
    return JournalEntry.objects.count(), Posting.objects.count(), list(Account.objects.values_list("id", "balance"))


@pytest.fixture
def funded(db, usdt, user):
    """The user's ``(available, held)`` USDT accounts with 10 available."""
    fund(user, usdt, "10")
    return user_accounts(user.id, usdt)


@pytest.mark.parametrize(
    ("legs", "error", "message"),
    [
        (lambda a, h, c: [Leg(a.id, Decimal(1)), Leg(999_999_999, Decimal(-1))], NotFound, "Unknown accounts"),
        (
            lambda a, h, c: [debit(c, Decimal("0.0000001")), credit(a, Decimal("0.0000001"))],
            InvalidAmount,
            "has more than 6 decimals for USDT",
        ),
        (
            lambda a, h, c: [debit(c, Decimal(2)), credit(a, Decimal(1))],
            UnbalancedEntry,
            "USDT debits exceed credits by 1.000000",
        ),
        (
            lambda a, h, c: hold_legs(available_id=a.id, held_id=h.id, amount=Decimal("10.5")),
            InsufficientFunds,
            "Insufficient USDT: 10.000000 available, 10.500000 needed.",
        ),
        (
            lambda a, h, c: release_legs(held_id=h.id, available_id=a.id, amount=Decimal(1)),
            InsufficientFunds,
            "Insufficient USDT: 0.000000 held, 1.000000 needed.",
        ),
        (
            lambda a, h, c: [debit(c, Decimal(10) ** 20 - 10), credit(a, Decimal(10) ** 20 - 10)],
            InvalidAmount,
            "The USDT user_available balance would reach 10\\^20 or more.",
        ),
    ],
    ids=["unknown-account", "finer-than-precision", "unbalanced", "short-available", "short-held", "10^20"],
)
def test_each_refusal_raises_its_error_writes_nothing_and_leaves_the_transaction_usable(
    funded, usdt, legs, error, message
):
    available, held = funded
    custody = system_account(AccountKind.CUSTODY, usdt)
    before = _journal()
    with transaction.atomic():
        with pytest.raises(error, match=message):
            entry_post(idempotency_key="refused", reason=EntryReason.ADJUSTMENT, legs=legs(available, held, custody))
        assert _journal() == before  # the same transaction still answers: the function raised nothing in SQL
    assert not JournalEntry.objects.filter(idempotency_key="refused").exists()


def test_a_key_posted_with_another_payload_is_a_conflict_that_writes_nothing(funded):
    available, held = funded
    with transaction.atomic():
        entries_post([_hold("hold:1", available, held, "1")])
    before = _journal()
    with pytest.raises(IdempotencyConflict, match="'hold:1' was already used"), transaction.atomic():
        entries_post([_hold("hold:1", available, held, "2")])
    assert _journal() == before


def test_a_batch_raises_the_error_of_its_first_failing_entry_and_writes_none_of_it(funded, usdt):
    available, held = funded
    custody = system_account(AccountKind.CUSTODY, usdt)
    before = _journal()
    unbalanced = EntryRequest("bad", EntryReason.DEPOSIT, [debit(custody, Decimal(2)), credit(available, Decimal(1))])
    batch = [
        _hold("hold:a", available, held, "6"),
        _hold("hold:b", available, held, "5"),  # 4 left: the first failure
        unbalanced,
    ]
    with transaction.atomic(), pytest.raises(InsufficientFunds, match="4.000000 available, 5.000000 needed"):
        entries_post(batch)
    with transaction.atomic(), pytest.raises(UnbalancedEntry):
        entries_post([batch[0], unbalanced, batch[1]])
    assert _journal() == before


def test_an_entry_refused_before_the_database_still_yields_to_an_earlier_failure(funded):
    available, held = funded
    one_leg = EntryRequest("one-leg", EntryReason.HOLD, [Leg(available.id, Decimal(1))])
    with transaction.atomic(), pytest.raises(InsufficientFunds):
        entries_post([_hold("hold:big", available, held, "11"), one_leg])
    with transaction.atomic(), pytest.raises(UnbalancedEntry, match="at least two legs"):
        entries_post([_hold("hold:small", available, held, "1"), one_leg, _hold("hold:big", available, held, "11")])
    assert not JournalEntry.objects.filter(idempotency_key__startswith="hold:").exists()


def test_balances_after_chain_across_the_entries_of_a_batch_that_share_accounts(funded):
    available, held = funded
    version = Account.objects.get(id=available.id).version
    with transaction.atomic():
        entries = entries_post(
            [
                _hold("hold:1", available, held, "3"),
                _hold("hold:2", available, held, "4"),
                _release("release:1", available, held, "2"),
            ]
        )
    after = {
        (p.entry_id, p.account_id): p.balance_after
        for p in Posting.objects.filter(entry_id__in=[entry.id for entry in entries])
    }
    assert [after[entry.id, available.id] for entry in entries] == [Decimal(7), Decimal(3), Decimal(5)]
    assert [after[entry.id, held.id] for entry in entries] == [Decimal(3), Decimal(7), Decimal(5)]
    available.refresh_from_db()
    held.refresh_from_db()
    assert (available.balance, available.version) == (Decimal(5), version + 3)
    assert (held.balance, held.version) == (Decimal(5), 3)


def test_a_funds_short_entry_later_in_a_batch_sees_what_earlier_entries_freed(funded):
    """Holding 12 from 10 succeeds when an entry before it in the batch releases 2 to available."""
    available, held = funded
    with transaction.atomic():
        entries_post([_hold("hold:1", available, held, "2")])
    with transaction.atomic():
        entries_post([_release("release:1", available, held, "2"), _hold("hold:2", available, held, "10")])
    available.refresh_from_db()
    assert available.balance == 0


def test_replays_in_a_batch_return_the_stored_entries_and_move_nothing(funded):
    available, held = funded
    with transaction.atomic():
        [first] = entries_post([_hold("hold:1", available, held, "9")])
    stored = JournalEntry.objects.get(id=first.id)
    with transaction.atomic():  # the replay would be short of funds: it is still recognised
        again, new = entries_post([_hold("hold:1", available, held, "9"), _hold("hold:2", available, held, "1")])
    assert (again.id, again.created_at) == (stored.id, stored.created_at)
    assert new.id != first.id
    available.refresh_from_db()
    assert available.balance == 0


def test_a_key_repeated_within_a_batch_is_one_entry_or_a_conflict(funded):
    available, held = funded
    with transaction.atomic():
        one, same = entries_post([_hold("hold:1", available, held, "1"), _hold("hold:1", available, held, "1")])
    assert one.id == same.id
    assert JournalEntry.objects.filter(idempotency_key="hold:1").count() == 1
    before = _journal()
    with transaction.atomic(), pytest.raises(IdempotencyConflict, match="'hold:2'"):
        entries_post([_hold("hold:2", available, held, "1"), _hold("hold:2", available, held, "2")])
    assert _journal() == before


def test_an_empty_batch_posts_nothing(db):
    with transaction.atomic():
        assert entries_post([]) == []


def test_a_batch_is_one_statement_for_the_server(funded, monkeypatch):
    available, held = funded
    statements = []
    execute = psycopg.Cursor.execute

    def counting(cursor, query, *args, **kwargs):
        statements.append(query)
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counting)
    with transaction.atomic():
        statements.clear()  # BEGIN is sent with the first statement
        entries_post([_hold(f"hold:{n}", available, held, "1") for n in range(5)])
        assert len(statements) == 1
    assert JournalEntry.objects.filter(idempotency_key__startswith="hold:").count() == 5


@pytest.mark.django_db(transaction=True)
def test_threads_posting_batches_that_share_accounts_never_deadlock_or_lose_an_update(usdt):
    users = UserFactory.create_batch(6)
    for user in users:
        fund(user, usdt, "1000")
    accounts = [user_account(user.id, usdt) for user in users]
    post = retrying_atomic(entries_post)

    def batches(seed: int) -> int:
        rng = random.Random(seed)
        for _ in range(5):
            batch = []
            for _ in range(20):
                source, destination = rng.sample(accounts, 2)
                amount = Decimal(rng.randint(1, 500)) / 100
                batch.append(
                    EntryRequest(
                        f"transfer:{uuid.uuid4()}",
                        EntryReason.TRANSFER,
                        [debit(source, amount), credit(destination, amount)],
                    )
                )
            post(batch)
        return 100

    results = run_concurrently([lambda seed=seed: batches(seed) for seed in range(4)])

    assert results == [100] * 4
    assert JournalEntry.objects.filter(reason=EntryReason.TRANSFER).count() == 400
    assert sum(Account.objects.filter(id__in=[a.id for a in accounts]).values_list("balance", flat=True)) == 6000
    assert ok_but_for_unbacked_recipes(reconcile())  # transfers: no business record by design


def test_the_posting_functions_plan_index_scans_even_on_tables_not_analyzed_yet(db):
    # Their plans are made once per connection (force_generic_plan): made on a small journal, sequential
    # scans would stay as it grows (migration 0007).
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT proname, proconfig FROM pg_proc WHERE proname LIKE 'ledger\\_%post\\_%' AND prokind = 'f'"
        )
        configs = dict(cursor.fetchall())
    assert set(configs) == {
        "ledger_post_entries_v1",
        "ledger_post_entries_v2",
        "ledger_transfer_post_v1",
        "ledger_transfer_post_v2",
    }
    for config in configs.values():
        assert {"enable_seqscan=off", "plan_cache_mode=force_generic_plan"} <= set(config)


def test_entry_ids_post_gives_the_ids_entries_post_would_replays_and_repeated_keys_included(funded):
    available, held = funded
    with transaction.atomic():
        (first,) = entries_post([_hold("hold:1", available, held, "1")])
    with transaction.atomic():
        ids = entry_ids_post(
            [
                _hold("hold:2", available, held, "2"),
                _hold("hold:1", available, held, "1"),  # posted before: its id, nothing written
                _release("release:1", available, held, "2"),
                _hold("hold:2", available, held, "2"),  # repeated in the batch: the same id
            ]
        )
    by_key = dict(JournalEntry.objects.values_list("idempotency_key", "id"))
    assert ids == [by_key["hold:2"], first.id, by_key["release:1"], by_key["hold:2"]]
    assert JournalEntry.objects.count() == 4  # the funding, hold:1, hold:2, release:1
    available.refresh_from_db()
    assert available.balance == Decimal(9)
    with transaction.atomic(), pytest.raises(InsufficientFunds):
        entry_ids_post([_hold("hold:3", available, held, "10")])
    with transaction.atomic():
        assert entry_ids_post([]) == []


def test_entry_ids_posting_gives_what_entry_ids_post_gives_once_its_block_ends(funded):
    available, held = funded
    with transaction.atomic():
        (first,) = entries_post([_hold("hold:1", available, held, "1")])
    with transaction.atomic():
        with entry_ids_posting(
            [_hold("hold:2", available, held, "2"), _hold("hold:1", available, held, "1")]
        ) as posting:
            with pytest.raises(RuntimeError, match="when the entry_ids_posting block ends"):
                posting.ids()
        ids = posting.ids()
    assert ids == [JournalEntry.objects.get(idempotency_key="hold:2").id, first.id]
    available.refresh_from_db()
    assert available.balance == Decimal(7)
    before = _journal()
    refused = [_hold("hold:3", available, held, "2"), _hold("hold:4", available, held, "6")]
    with transaction.atomic(), pytest.raises(InsufficientFunds):  # raised when the block ends
        with entry_ids_posting(refused):
            pass
    assert _journal() == before
    with transaction.atomic():
        with entry_ids_posting([]) as posting:
            pass
        assert posting.ids() == []


def test_entry_ids_posting_runs_the_posting_while_its_block_runs(transactional_db, funded):
    """The call is sent when the block starts: PostgreSQL is already waiting for the account another session
    holds while the block still runs (in pg_stat_activity), and the block's end reads the entry once it is free."""
    available, held = funded
    connection.ensure_connection()
    with psycopg.connect(connection.connection.info.dsn) as other:
        other.execute("SELECT id FROM ledger_account WHERE id = %s FOR UPDATE", [held.id])
        with transaction.atomic():
            ours = connection.connection.info.backend_pid
            with entry_ids_posting([_hold("hold:1", available, held, "1")]) as posting:
                waiting = None
                for _ in range(200):
                    with psycopg.connect(connection.connection.info.dsn, autocommit=True) as observer:
                        waiting = observer.execute(
                            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [ours]
                        ).fetchone()
                    if waiting == ("Lock",):
                        break
                    time.sleep(0.05)
                assert waiting == ("Lock",)
                other.rollback()  # frees the account: the posting goes on
        (entry_id,) = posting.ids()
    assert JournalEntry.objects.get(idempotency_key="hold:1").id == entry_id
