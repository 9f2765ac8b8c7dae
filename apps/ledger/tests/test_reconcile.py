import json
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from apps.ledger.models import AccountKind, JournalEntry
from apps.ledger.reconciliation import reconcile, registered_invariants
from apps.ledger.services import funds_hold, system_account, user_account
from apps.ledger.tests.factories import fund


def run_reconcile(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("reconcile", *args, stdout=out)
    except SystemExit as exit_:
        return int(exit_.code or 0), out.getvalue()
    return 0, out.getvalue()


def test_clean_ledger_passes_with_figures_per_asset(db, usdt, btc, user, declared_holds):
    """The ledger's tests import no other app: the hold stands in for an order's (``declared_holds`` explains it),
    so the one failure is the check that looks for the order behind it (invariant 8, backing)."""
    fund(user, usdt, "100")
    hold = funds_hold(user_id=user.id, asset=usdt, amount=Decimal("25"), idempotency_key="order:1:hold")
    declared_holds[(user.id, usdt.id)] += Decimal("25")

    code, out = run_reconcile("--json")

    report = json.loads(out)
    assert code == 1
    assert [
        (check["name"], [row["entry"] for row in check["details"]]) for check in report["checks"] if not check["ok"]
    ] == [("entry_reasons_backed", [hold.id])]
    assert {check["name"] for check in report["checks"]} >= {
        "entries_balanced",
        "balances_match_postings",
        "held_matches_open_holds",
        "user_balances_not_negative",
        "journal_append_only",
        "idempotency_keys_unique",
    }
    assert report["assets"]["USDT"]["equity"] == "-100.000000"
    assert report["assets"]["USDT"]["user_available"] == "75.000000"
    assert report["assets"]["USDT"]["user_held"] == "25.000000"
    assert report["assets"]["BTC"]["custody"] == "0.00000000"


def test_ledger_invariants_are_registered():
    assert registered_invariants() >= {1, 2, 3, 4, 6, 7}


def test_held_funds_that_no_open_hold_explains_are_found(db, usdt, user, declared_holds):
    fund(user, usdt, "100")
    funds_hold(user_id=user.id, asset=usdt, amount=Decimal("25"), idempotency_key="order:1:hold")
    declared_holds[(user.id, usdt.id)] += Decimal("20")

    report = reconcile()

    check = next(c for c in report.checks if c.name == "held_matches_open_holds")
    assert not report.ok
    assert check.details == [
        {
            "account": user_account(user.id, usdt, AccountKind.USER_HELD).id,
            "owner": user.id,
            "asset": "USDT",
            "held": "25.000000",
            "open_holds": "20.000000",
        }
    ]


def test_stored_balance_changed_with_raw_sql_is_found_and_named(db, usdt, user):
    fund(user, usdt, "100")
    account = user_account(user.id, usdt)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_account SET balance = balance + 1 WHERE id = %s", [account.id])

    code, out = run_reconcile("--json")

    report = json.loads(out)
    failed = {check["name"]: check for check in report["checks"] if not check["ok"]}
    assert code == 1
    assert list(failed) == ["balances_match_postings"]
    assert failed["balances_match_postings"]["details"] == [
        {
            "account": account.id,
            "kind": "user_available",
            "owner": user.id,
            "asset": "USDT",
            "stored_balance": "101.000000",
            "postings_balance": "100.000000",
            "last_balance_after": "100.000000",
            "version": 1,
            "postings": 1,
        }
    ]


@pytest.mark.parametrize(
    ("table", "trigger", "alter", "problem"),
    [
        ("ledger_posting", "immutable", "DISABLE TRIGGER {name}", "disabled"),
        # Postings' references are checked once (at their insert): accounts must stay deletable by no one.
        ("ledger_account", "permanent", "DISABLE TRIGGER {name}", "disabled"),
        ("ledger_account", "keys_fixed", "DISABLE TRIGGER {name}", "disabled"),
        ("ledger_account", "truncated_with_postings", "DISABLE TRIGGER {name}", "disabled"),
        ("ledger_posting", "entry_balanced", "ENABLE REPLICA TRIGGER {name}", "fires only on a replica"),
        (
            "ledger_journalentry",
            "immutable",
            "ENABLE TRIGGER {name}",  # back to origin-only: a session in replica mode skips it
            "skipped by sessions with session_replication_role = replica (not ENABLE ALWAYS)",
        ),
    ],
)
def test_a_ledger_trigger_that_does_not_fire_is_found(db, usdt, user, table, trigger, alter, problem):
    fund(user, usdt, "1")
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # run the pending checks so the table can be altered
        cursor.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND tgname LIKE %s",
            [table, f"pgtrigger\\_{trigger}\\_%"],
        )
        ((name,),) = cursor.fetchall()
        cursor.execute(f"ALTER TABLE {table} {alter.format(name=name)}")  # undone by the test's rollback

    check = next(c for c in reconcile().checks if c.name == "journal_append_only")

    assert not check.ok
    assert check.details == [{"table": table, "trigger": f"pgtrigger_{trigger}", "problem": problem}]


@pytest.mark.parametrize("neuter", ["function_lets_everything_through", "recreated_when_false", "fewer_events"])
def test_a_ledger_trigger_neutered_but_left_looking_in_place_is_found(db, usdt, user, neuter):
    """Found by a break-it review: a superuser replaced the immutable trigger's function with one that returns
    the row, or recreated the trigger under its name ``WHEN (false)``, enabled always: UPDATEs of postings went
    through and reconcile said ``ok``."""
    fund(user, usdt, "1")
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # run the pending checks so the table can be altered
        cursor.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'ledger_posting'::regclass AND tgname LIKE %s",
            ["pgtrigger\\_immutable\\_%"],
        )
        ((name,),) = cursor.fetchall()
        if neuter == "function_lets_everything_through":  # all undone by the test's rollback
            cursor.execute(
                f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RETURN COALESCE(NEW, OLD); END; $$"
            )
        else:
            events = "UPDATE OR DELETE" if neuter == "recreated_when_false" else "DELETE"
            condition = "WHEN (false)" if neuter == "recreated_when_false" else ""
            cursor.execute(f"DROP TRIGGER {name} ON ledger_posting")
            cursor.execute(
                f"CREATE TRIGGER {name} BEFORE {events} ON ledger_posting FOR EACH ROW {condition}"
                f" EXECUTE FUNCTION {name}()"
            )
            cursor.execute(f"ALTER TABLE ledger_posting ENABLE ALWAYS TRIGGER {name}")
        cursor.execute("UPDATE ledger_posting SET amount = amount WHERE false")  # the statement parses

    check = next(c for c in reconcile().checks if c.name == "journal_append_only")

    assert check.details == [
        {
            "table": "ledger_posting",
            "trigger": "pgtrigger_immutable",
            "problem": "changed: not the trigger its migration installs (function, events, level or condition)",
        }
    ]


def test_postings_written_past_the_triggers_without_their_entry_or_account_are_found(db, usdt, btc, user):
    fund(user, usdt, "1")
    available = user_account(user.id, usdt)
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # run the pending checks so the table can be altered
        cursor.execute("ALTER TABLE ledger_posting DISABLE TRIGGER USER")  # what a table owner can do
        cursor.execute(
            "INSERT INTO ledger_posting (entry_id, account_id, asset_id, amount, balance_after) VALUES"
            " (987654321, %(account)s, %(usdt)s, 1, 0), (%(entry)s, %(account)s, %(btc)s, 1, 0) RETURNING id",
            {"account": available.id, "usdt": usdt.id, "btc": btc.id, "entry": JournalEntry.objects.get().id},
        )
        no_entry, wrong_asset = sorted(posting_id for (posting_id,) in cursor.fetchall())
        cursor.execute("ALTER TABLE ledger_posting ENABLE TRIGGER USER")

    check = next(c for c in reconcile().checks if c.name == "postings_referenced")

    assert not check.ok
    assert [(row["posting"], row["problem"]) for row in check.details] == [
        (no_entry, "no such journal entry"),
        (wrong_asset, "no account of this asset"),
    ]


def test_text_output_names_the_offending_account_and_exits_1(db, usdt, user):
    fund(user, usdt, "5")
    custody = system_account(AccountKind.CUSTODY, usdt)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_account SET version = 7 WHERE id = %s", [custody.id])

    code, out = run_reconcile()

    assert code == 1
    assert "FAIL invariant 2: balances_match_postings" in out
    assert f"account={custody.id}, kind=custody" in out


def test_asset_filter_limits_the_checks_to_one_asset(db, usdt, btc, user):
    fund(user, btc, "1")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_account SET balance = 2 WHERE kind = 'equity'")

    assert run_reconcile("--asset", "USDT")[0] == 0
    assert run_reconcile("--asset", "BTC")[0] == 1


def test_unknown_asset_is_a_usage_error_not_a_failed_invariant(db):
    """Break-it review: ``--asset DOGE`` exited 1, the code of a failed invariant, so an alert reported a typo as
    broken books; a usage error exits 2, as argparse's own do."""
    with pytest.raises(CommandError, match="Unknown asset DOGE") as refused:
        call_command("reconcile", "--asset", "DOGE")
    assert refused.value.returncode == 2


def test_asset_given_twice_is_a_usage_error_not_a_check_of_the_last_one(db, btc, usdt):
    """Break-it review: ``--asset BTC --asset ETH`` checked ETH only and exited 0."""
    with pytest.raises(CommandError, match="Give --asset once") as refused:
        call_command("reconcile", "--asset", "BTC", "--asset", "USDT")
    assert refused.value.returncode == 2
