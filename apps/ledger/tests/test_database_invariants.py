"""The invariants PostgreSQL enforces by itself, whatever code writes (raw SQL here)."""

from decimal import Decimal

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from apps.ledger.models import Account, AccountKind, Asset, JournalEntry, Posting
from apps.ledger.services import system_account, user_account
from apps.ledger.tests.factories import UserFactory, fund


def _raw_entry(cursor, key: str) -> int:
    cursor.execute(
        "INSERT INTO ledger_journalentry (idempotency_key, reason, reference_type, reference_id, metadata,"
        " payload_hash, created_at) VALUES (%s, 'adjustment', '', '', '{}', '', %s) RETURNING id",
        [key, timezone.now()],
    )
    return cursor.fetchone()[0]


def _raw_posting(cursor, entry_id: int, account: Account, amount: str) -> None:
    cursor.execute(
        "INSERT INTO ledger_posting (entry_id, account_id, asset_id, amount, balance_after) VALUES (%s, %s, %s, %s, 0)",
        [entry_id, account.id, account.asset_id, Decimal(amount)],
    )


def _raw_entry_with_postings(cursor, key: str, postings: list[tuple[Account, str]], *, asset_id: int | None = None):
    """Insert an entry and its postings in one statement, as the posting function does (``asset_id`` overrides)."""
    cursor.execute(
        "WITH entry AS (INSERT INTO ledger_journalentry (idempotency_key, reason, reference_type, reference_id,"
        " metadata, payload_hash, created_at) VALUES (%s, 'adjustment', '', '', '{}', '', %s) RETURNING id)"
        " INSERT INTO ledger_posting (entry_id, account_id, asset_id, amount, balance_after)"
        " SELECT entry.id, p.account_id, p.asset_id, p.amount, 0"
        " FROM entry, unnest(%s::bigint[], %s::bigint[], %s::numeric[]) AS p(account_id, asset_id, amount)",
        [
            key,
            timezone.now(),
            [account.id for account, _ in postings],
            [asset_id or account.asset_id for account, _ in postings],
            [Decimal(amount) for _, amount in postings],
        ],
    )


def test_unbalanced_entry_written_with_raw_sql_is_refused(transactional_db, usdt, user):
    custody = system_account(AccountKind.CUSTODY, usdt)
    available = user_account(user.id, usdt)

    with pytest.raises(IntegrityError, match="does not balance per asset"):
        with transaction.atomic(), connection.cursor() as cursor:
            _raw_entry_with_postings(cursor, "raw:unbalanced", [(custody, "10"), (available, "-9")])

    assert not JournalEntry.objects.filter(idempotency_key="raw:unbalanced").exists()


def test_balanced_entry_across_two_assets_that_does_not_balance_per_asset_is_refused(transactional_db, usdt, btc, user):
    usdt_custody = system_account(AccountKind.CUSTODY, usdt)
    btc_available = user_account(user.id, btc)

    with pytest.raises(IntegrityError, match="does not balance per asset"):
        with transaction.atomic(), connection.cursor() as cursor:
            _raw_entry_with_postings(cursor, "raw:cross-asset", [(usdt_custody, "1"), (btc_available, "-1")])


def test_entry_without_postings_is_refused(transactional_db):
    with pytest.raises(IntegrityError, match="fewer than two postings"):
        with transaction.atomic(), connection.cursor() as cursor:
            _raw_entry(cursor, "raw:empty")


def test_an_entry_whose_postings_come_in_a_later_statement_is_refused(transactional_db, usdt, user):
    """The checks run at the end of each INSERT: an entry is written with its postings, in one statement."""
    custody = system_account(AccountKind.CUSTODY, usdt)
    available = user_account(user.id, usdt)
    with pytest.raises(IntegrityError, match="fewer than two postings"):
        with transaction.atomic(), connection.cursor() as cursor:
            entry_id = _raw_entry(cursor, "raw:split")
            _raw_posting(cursor, entry_id, custody, "1")
            _raw_posting(cursor, entry_id, available, "-1")
    assert not JournalEntry.objects.filter(idempotency_key="raw:split").exists()


def test_a_posting_added_later_to_a_posted_entry_is_refused(transactional_db, usdt, user):
    fund(user, usdt, "5")
    entry = JournalEntry.objects.get()
    with pytest.raises(IntegrityError, match=f"journal entry {entry.id} does not balance per asset"):
        with transaction.atomic(), connection.cursor() as cursor:
            _raw_posting(cursor, entry.id, user_account(user.id, usdt), "-1")


def test_of_two_entries_written_together_the_one_that_does_not_balance_is_named(transactional_db, usdt, user):
    """Each INSERT is checked on its own rows, entry by entry: 'raw:good' balances, 'raw:bad' (written second, so
    holding the sequence's last id) does not."""
    custody = system_account(AccountKind.CUSTODY, usdt)
    available = user_account(user.id, usdt)
    with pytest.raises(IntegrityError, match="does not balance per asset") as refused:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "WITH entry AS (INSERT INTO ledger_journalentry (idempotency_key, reason, reference_type, reference_id,"
                " metadata, payload_hash, created_at) VALUES ('raw:good', 'adjustment', '', '', '{}', '', now()),"
                " ('raw:bad', 'adjustment', '', '', '{}', '', now()) RETURNING id, idempotency_key)"
                " INSERT INTO ledger_posting (entry_id, account_id, asset_id, amount, balance_after)"
                " SELECT entry.id, p.account_id, %(asset)s, p.amount, 0 FROM entry JOIN (VALUES"
                " ('raw:good', %(custody)s::bigint, 2::numeric), ('raw:good', %(available)s, -2),"
                " ('raw:bad', %(custody)s, 3), ('raw:bad', %(available)s, -1)) AS p(key, account_id, amount)"
                " ON p.key = entry.idempotency_key RETURNING entry_id",
                {"asset": usdt.id, "custody": custody.id, "available": available.id},
            )
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value FROM ledger_journalentry_id_seq")
        assert refused.match(rf"journal entry {cursor.fetchone()[0]} does not balance")
    assert not JournalEntry.objects.filter(idempotency_key__startswith="raw:").exists()


def test_posting_finer_than_the_asset_precision_is_refused(transactional_db, usdt, user):
    custody = system_account(AccountKind.CUSTODY, usdt)
    available = user_account(user.id, usdt)

    with pytest.raises(IntegrityError, match="precision"), transaction.atomic(), connection.cursor() as cursor:
        _raw_entry_with_postings(cursor, "raw:dust", [(custody, "0.0000001"), (available, "-0.0000001")])


def test_posting_whose_asset_differs_from_its_account_is_refused(db, usdt, btc, user):
    available = user_account(user.id, usdt)
    with pytest.raises(IntegrityError, match="names no account of its asset"):
        with transaction.atomic(), connection.cursor() as cursor:
            _raw_entry_with_postings(cursor, "raw:wrong-asset", [(available, "1"), (available, "-1")], asset_id=btc.id)
    assert not Posting.objects.exists()


def test_a_posting_on_an_unknown_account_is_refused(db, usdt, user):
    available = user_account(user.id, usdt)
    ghost = Account(id=available.id + 1000, asset_id=usdt.id)
    with pytest.raises(IntegrityError, match=r"posting \d+ names no account of its asset"):
        with transaction.atomic(), connection.cursor() as cursor:
            _raw_entry_with_postings(cursor, "raw:ghost", [(available, "1"), (ghost, "-1")])
    assert not JournalEntry.objects.filter(idempotency_key="raw:ghost").exists()


def test_balanced_postings_of_an_entry_that_does_not_exist_are_refused(db, usdt, user):
    custody = system_account(AccountKind.CUSTODY, usdt)
    available = user_account(user.id, usdt)
    with pytest.raises(IntegrityError, match=r"posting \d+ names no journal entry"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO ledger_posting (entry_id, account_id, asset_id, amount, balance_after)"
                " VALUES (987654321, %s, %s, 1, 0), (987654321, %s, %s, -1, 0)",
                [custody.id, usdt.id, available.id, usdt.id],
            )
    assert not Posting.objects.exists()


def test_an_account_cannot_be_deleted_with_or_without_postings(db, usdt, btc, user):
    fund(user, usdt, "5")
    accounts = [user_account(user.id, usdt), user_account(user.id, btc)]  # the second one has no posting
    for account in accounts:
        with pytest.raises(DatabaseError, match="Cannot delete rows from ledger_account"):
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("DELETE FROM ledger_account WHERE id = %s", [account.id])
    assert Account.objects.filter(id__in=[a.id for a in accounts]).count() == 2


@pytest.mark.parametrize(
    "change",
    [
        "asset_id = %(other_asset)s",
        "id = id + 1000000",
        "owner_id = %(other_user)s",  # break-it review: a customer's balance moved to another, journal_verify ok
        "kind = 'user_held'",
        "shard = 1",
    ],
)
def test_an_accounts_id_asset_owner_kind_and_shard_never_change(db, usdt, btc, user, change):
    fund(user, usdt, "5")
    other = UserFactory()
    user_account(other.id, usdt)  # the other customer's account exists, as in the review
    available = user_account(user.id, usdt)
    with pytest.raises(DatabaseError, match="Cannot update rows from ledger_account"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE ledger_account SET {change} WHERE id = %(id)s",
                {"other_asset": btc.id, "other_user": other.id, "id": available.id},
            )
    available.refresh_from_db()
    assert (available.asset_id, available.owner_id, available.kind, available.shard, available.balance) == (
        usdt.id,
        user.id,
        "user_available",
        0,
        Decimal(5),
    )


@pytest.mark.parametrize(
    ("ignored", "statement"),
    [
        ("entry_balanced", "INSERT INTO ledger_posting (entry_id, account_id, asset_id, amount, balance_after)"
         " VALUES (987654321, 987654321, %(asset)s, 5, 0), (987654321, 987654321, %(asset)s, -5, 0)"),
        ("immutable", "UPDATE ledger_posting SET entry_id = 987654321"),
        ("permanent", "DELETE FROM ledger_account"),
    ],
)  # fmt: skip
def test_a_session_cannot_switch_a_ledger_trigger_off_with_pgtrigger_ignore(db, usdt, user, ignored, statement):
    """django-pgtrigger's own triggers skip themselves for ``SET pgtrigger.ignore``: the ledger's do not."""
    fund(user, usdt, "5")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tgname FROM pg_trigger WHERE tgname LIKE %s AND NOT tgisinternal", [f"pgtrigger_{ignored}_%"]
        )
        names = [name for (name,) in cursor.fetchall()]
    assert names
    with pytest.raises(DatabaseError):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT set_config('pgtrigger.ignore', %s, true)", ["{" + ",".join(names) + "}"])
            cursor.execute(statement, {"asset": usdt.id})
    assert Posting.objects.count() == 2 and Account.objects.count() == 2


@pytest.mark.parametrize(
    "tables",
    ["ledger_account", "ledger_journalentry CASCADE", "auth_user CASCADE", "ledger_asset CASCADE"],
)
def test_accounts_and_entries_are_truncated_only_together_with_the_postings(db, usdt, user, tables):
    fund(user, usdt, "5")
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # run the pending checks so the tables can be truncated
    with pytest.raises(IntegrityError, match="truncate it together with ledger_posting"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {tables}")
    assert (Posting.objects.count(), Account.objects.count(), JournalEntry.objects.count()) == (2, 2, 1)

    with transaction.atomic(), connection.cursor() as cursor:  # with the postings (a test database's flush)
        cursor.execute("TRUNCATE ledger_posting, ledger_journalentry, ledger_account CASCADE")
        assert not Account.objects.exists()
        transaction.set_rollback(True)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE ledger_posting SET amount = amount * 2",
        "DELETE FROM ledger_posting",
        "UPDATE ledger_journalentry SET reason = 'transfer'",
        "DELETE FROM ledger_journalentry",
    ],
)
@pytest.mark.parametrize("role", ["origin", "replica"])
def test_journal_rows_cannot_be_updated_or_deleted(db, usdt, user, statement, role):
    """Not in a replica session either (break-it review: a superuser's ``SET session_replication_role = replica``
    skipped every trigger created plainly, and left nothing in ``pg_trigger`` for reconcile to see)."""
    fund(user, usdt, "5")
    before = list(Posting.objects.values_list("id", "amount"))

    with pytest.raises(DatabaseError, match="Cannot update or delete"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT set_config('session_replication_role', %s, true)", [role])
            cursor.execute(statement)

    assert list(Posting.objects.values_list("id", "amount")) == before


def test_user_balance_cannot_go_negative_even_with_raw_sql(db, usdt, user):
    available = user_account(user.id, usdt)
    with pytest.raises(IntegrityError, match="account_user_balance_not_negative"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("UPDATE ledger_account SET balance = -1 WHERE id = %s", [available.id])


def test_posting_amount_cannot_be_zero(db, usdt, user):
    custody = system_account(AccountKind.CUSTODY, usdt)
    with pytest.raises(IntegrityError, match="posting_amount_not_zero"):
        with transaction.atomic(), connection.cursor() as cursor:
            _raw_entry_with_postings(cursor, "raw:zero", [(custody, "0"), (custody, "0")])


def test_asset_precision_cannot_change_once_created(db, usdt):
    with pytest.raises(DatabaseError, match="precision_fixed|Cannot update"), transaction.atomic():
        Asset.objects.filter(id=usdt.id).update(decimals=2)
    usdt.refresh_from_db()
    assert usdt.decimals == 6
