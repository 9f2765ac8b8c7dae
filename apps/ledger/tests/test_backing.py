"""Reconciliation's backing rule in the ledger (invariant 8): entries of a reason no business record backs."""

from decimal import Decimal

import pytest
from django.db import connection

from apps.ledger.amounts import money
from apps.ledger.models import EntryReason
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import funds_hold, funds_release, transfer_create, user_account
from apps.ledger.tests.factories import UserFactory, fund
from apps.ledger.tests.forgery import available_to_held, backing_failures, flagged_entries, forge, user_to_user


@pytest.fixture
def alice_and_bob(usdt, btc):
    alice, bob = UserFactory(), UserFactory()
    fund(alice, usdt, "100")
    fund(bob, btc, "1")
    return alice, bob


def test_funded_users_are_backed_by_their_approved_adjustments(alice_and_bob):
    assert backing_failures(reconcile()) == {}


@pytest.mark.parametrize("reason", [EntryReason.TRANSFER, EntryReason.HOLD, EntryReason.RELEASE])
def test_an_entry_of_a_reason_nothing_in_production_posts_is_flagged(alice_and_bob, usdt, reason):
    alice, bob = alice_and_bob
    legs = {
        EntryReason.TRANSFER: user_to_user(alice, bob, usdt, "10"),
        EntryReason.HOLD: available_to_held(alice, usdt, "10"),
        EntryReason.RELEASE: available_to_held(alice, usdt, "10", reverse=True),
    }
    if reason == EntryReason.RELEASE:  # something held to release: another forged (unbacked) entry
        forge(reason=EntryReason.HOLD, legs=legs[EntryReason.HOLD])
    entry = forge(reason=reason, legs=legs[reason], reference_type=reason, reference_id="1")

    (row,) = [row for row in backing_failures(reconcile())["entry_reasons_backed"] if row["entry"] == entry.id]

    assert row == {
        "entry": entry.id,
        "idempotency_key": entry.idempotency_key,
        "reason": reason,
        "reference_type": reason,
        "reference_id": "1",
        "problem": "no business record backs this reason",
    }


def test_the_ledger_services_that_no_production_code_calls_post_unbacked_entries(alice_and_bob, usdt):
    alice, bob = alice_and_bob
    transfer = transfer_create(
        source_user_id=alice.id, destination_user_id=bob.id, amount=money(Decimal(5), "USDT"), transfer_id="t1"
    )
    hold = funds_hold(user_id=alice.id, asset=usdt, amount=Decimal("3"), idempotency_key="k:hold")
    release = funds_release(user_id=alice.id, asset=usdt, amount=Decimal("3"), idempotency_key="k:release")

    assert flagged_entries(reconcile()) == {
        entry.id: "no business record backs this reason" for entry in (transfer, hold, release)
    }


def test_an_entry_of_a_reason_outside_the_recipes_written_in_sql_is_flagged(alice_and_bob, usdt):
    alice, bob = alice_and_bob
    source, destination = user_account(alice.id, usdt), user_account(bob.id, usdt)
    with connection.cursor() as cursor:  # entry and postings in one statement, as the triggers require
        cursor.execute(
            """
            WITH e AS (
                INSERT INTO ledger_journalentry (idempotency_key, reason, reference_type, reference_id, metadata,
                                                 payload_hash, created_at)
                VALUES ('gift:1', 'gift', '', '', '{}', '', now()) RETURNING id
            )
            INSERT INTO ledger_posting (entry_id, account_id, asset_id, amount, balance_after)
            SELECT e.id, a.id, a.asset_id, v.amount, 0 FROM e, (VALUES (%s::bigint, 7), (%s, -7)) v (account, amount)
            JOIN ledger_account a ON a.id = v.account
            RETURNING entry_id
            """,
            [source.id, destination.id],
        )
        entry_id = cursor.fetchone()[0]

    assert flagged_entries(reconcile()) == {entry_id: "no business record backs this reason"}


def test_a_filtered_report_flags_only_the_entries_of_its_assets(alice_and_bob, usdt, btc):
    alice, bob = alice_and_bob
    entry = forge(reason=EntryReason.TRANSFER, legs=user_to_user(alice, bob, usdt, "1"))

    assert flagged_entries(reconcile(asset_code="USDT")) == {entry.id: "no business record backs this reason"}
    assert flagged_entries(reconcile(asset_code="BTC")) == {}


def test_a_hold_under_an_orders_key_with_the_generic_reason_is_flagged(alice_and_bob, usdt):
    alice, _ = alice_and_bob
    entry = funds_hold(user_id=alice.id, asset=usdt, amount=Decimal("1"), idempotency_key="order:1:hold")

    assert flagged_entries(reconcile()) == {entry.id: "no business record backs this reason"}
