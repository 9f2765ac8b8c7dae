"""Taking snapshots at a sealed block, serving them, and the command."""

from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from apps.core.errors import InvalidState
from apps.ledger.models import Account, Asset, BlockEntry, JournalBlock, Posting
from apps.ledger.reconciliation import reconcile
from apps.ledger.seal.keys import signing_key_active
from apps.ledger.seal.services import journal_seal
from apps.ledger.services import funds_hold
from apps.ledger.tests.factories import UserFactory, fund
from apps.ledger.tests.seal_helpers import (
    as_superuser_without_triggers,
    chain_rewrite,
    entry_amounts_shifted,
    run_command,
    verify_json,
)
from apps.proofs.models import LiabilityLeaf, LiabilityNode, LiabilitySnapshot
from apps.proofs.services import liabilities_snapshot_take
from apps.proofs.tasks import liabilities_snapshot_scheduled


def test_a_snapshot_holds_every_user_with_a_balance_and_signs_its_header(snapshot, funded, api, verifier):
    listed = api.get("/api/v1/proofs/liabilities/").json()

    assert snapshot.leaf_count == 3  # dan has nothing: no leaf
    assert set(LiabilityLeaf.objects.filter(snapshot=snapshot).values_list("user_id", flat=True)) == {
        u.id for u in funded[:3]
    }
    assert snapshot.assets == [{"code": "BTC", "decimals": 8}, {"code": "USDT", "decimals": 6}]
    assert snapshot.root_sums == ["1.75000000", "12.000001"]
    assert LiabilityNode.objects.filter(snapshot=snapshot).count() == 3 + 2 + 1  # 3 leaves, 2, the root
    assert listed == [
        {
            "snapshot": listed[0]["snapshot"],
            "snapshot_hash": snapshot.snapshot_hash,
            "signature": snapshot.signature,
            "key_id": snapshot.key_id,
        }
    ]
    assert listed[0]["snapshot"]["block_height"] == 0 and listed[0]["snapshot"]["leaf_count"] == 3


def test_the_published_snapshots_list_takes_the_limit_its_schema_declares(funded, api):
    first = liabilities_snapshot_take()
    fund(funded[3], Asset.objects.get(code="BTC"), "1")
    journal_seal()
    second = liabilities_snapshot_take()

    limited = api.get("/api/v1/proofs/liabilities/", {"limit": "1"})
    everything = api.get("/api/v1/proofs/liabilities/")

    assert limited.status_code == 200
    assert [listed["snapshot_hash"] for listed in limited.json()] == [second.snapshot_hash]
    assert [listed["snapshot_hash"] for listed in everything.json()] == [second.snapshot_hash, first.snapshot_hash]


def test_every_users_proof_verifies_and_the_user_without_a_balance_has_none(snapshot, funded, api, api_as, verifier):
    keys = api.get("/api/v1/proofs/keys/").json()

    balances = [verifier.verify(api_as(u).get("/api/v1/proofs/liabilities/latest/").json(), keys) for u in funded[:3]]

    assert balances == [["0.50000000", "12.000000"], ["1.25000000", "0.000000"], ["0.00000000", "0.000001"]]
    missing = api_as(funded[3]).get("/api/v1/proofs/liabilities/latest/")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert api.get("/api/v1/proofs/liabilities/latest/").status_code in (401, 403)


def test_a_users_proof_in_an_earlier_snapshot_is_served_by_its_id(snapshot, funded, btc, api, api_as, verifier):
    """Break-it review: only the newest snapshot's proof was served, so a customer who missed a day could never check
    that day's liabilities."""
    ann, dan = funded[0], funded[3]
    fund(ann, btc, "2")
    fund(dan, btc, "1")
    journal_seal()
    newer = liabilities_snapshot_take()
    keys = api.get("/api/v1/proofs/keys/").json()

    earlier = api_as(ann).get(f"/api/v1/proofs/liabilities/{snapshot.id}/proof/")
    latest = api_as(ann).get(f"/api/v1/proofs/liabilities/{newer.id}/proof/")

    assert earlier.status_code == 200 and earlier.json()["snapshot"]["snapshot_id"] == snapshot.id
    assert verifier.verify(earlier.json(), keys) == ["0.50000000", "12.000000"]
    assert latest.json() == api_as(ann).get("/api/v1/proofs/liabilities/latest/").json()
    assert verifier.verify(latest.json(), keys) == ["2.50000000", "12.000000"]
    not_in_it = api_as(dan).get(f"/api/v1/proofs/liabilities/{snapshot.id}/proof/")
    assert (
        not_in_it.status_code == 404 and f"liabilities snapshot {snapshot.id}" in not_in_it.json()["error"]["message"]
    )
    for missing in (str(newer.id + 1), "0", "x", "9" * 30):
        refused = api_as(ann).get(f"/api/v1/proofs/liabilities/{missing}/proof/")
        assert refused.status_code == 404 and set(refused.json()["error"]["fields"]) == {"snapshot_id"}
    assert api.get(f"/api/v1/proofs/liabilities/{snapshot.id}/proof/").status_code in (401, 403)


def test_held_funds_count_and_unsealed_entries_wait_for_the_next_snapshot(funded, usdt, btc, api_as):
    ann = funded[0]
    funds_hold(user_id=ann.id, asset=usdt, amount=Decimal("2"), idempotency_key="order:1:hold")  # unsealed
    fund(ann, btc, "9")  # unsealed

    first = liabilities_snapshot_take()
    from apps.ledger.seal.services import journal_seal

    journal_seal()
    second = liabilities_snapshot_take()

    assert first.root_sums == ["1.75000000", "12.000001"]  # as of block 0
    assert second.root_sums == ["10.75000000", "12.000001"]  # the hold moved 2 USDT to held: same total
    proof = api_as(ann).get("/api/v1/proofs/liabilities/latest/").json()
    assert proof["snapshot"]["snapshot_id"] == second.id and proof["balances"] == ["9.50000000", "12.000000"]


def test_a_snapshot_needs_a_sealed_block(db, usdt, user):
    fund(user, usdt, "1")
    with pytest.raises(CommandError, match="Nothing is sealed yet"):
        call_command("liabilities_snapshot")


def test_the_command_prints_the_snapshot(funded):
    out = StringIO()
    call_command("liabilities_snapshot", stdout=out)
    assert "at block 0: 3 users" in out.getvalue() and "BTC 1.75000000, USDT 12.000001" in out.getvalue()


def test_the_snapshot_rows_are_append_only(snapshot):
    from django.db import DatabaseError, connection, transaction

    for sql in ("UPDATE proofs_liabilitysnapshot SET leaf_count = 9", "DELETE FROM proofs_liabilitynode"):
        with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)


def test_custody_holdings_are_recorded_with_the_snapshot(db, usdt, btc, user):
    from apps.ledger.seal.services import journal_seal
    from apps.wallets.tests.factories import deposit_through_custody

    deposit_through_custody(user, btc, "0.3")
    journal_seal()

    snapshot = liabilities_snapshot_take()

    assert snapshot.custody_error == ""
    assert snapshot.custody_holdings == {"BTC": "0.30000000"}
    assert snapshot.root_sums == ["0.30000000", "0.000000"]


# Snapshots against the chain (journal_verify, reconcile's invariant 9) -----------------------------


def test_journal_verify_checks_every_snapshot_against_the_chain(snapshot):
    code, result = verify_json()

    assert code == 0 and result["references"] == 1 and result["reference_problems"] == []


def test_a_history_rewritten_below_a_snapshot_is_caught_even_when_signed_with_the_pinned_key(snapshot, funded):
    """Whoever holds the signing key (or the sealer's host) rewrites block 0 and re-signs it: every block verifies
    on its own, but the snapshot published at block 0 recorded the old hash."""
    victim = BlockEntry.objects.get(block_id=0, position=0).entry_id
    entry_amounts_shifted(victim)
    chain_rewrite(signing_key_active().private_key)
    rewritten = JournalBlock.objects.get(height=0).block_hash

    code, result = verify_json()

    assert code == 1 and result["discrepancy"] is None and result["key_problems"] == []
    assert result["reference_problems"] == [
        {
            "reference": f"snapshot {snapshot.id}",
            "height": 0,
            "problem": f"it records block hash {snapshot.block_hash}, the chain's block 0 has {rewritten}",
        }
    ]
    assert (
        run_command("journal_verify")[1]
        == f"FAIL snapshot {snapshot.id} at block 0: {result['reference_problems'][0]['problem']}\n"
    )
    check = next(c for c in reconcile().checks if c.name == "journal_sealed")
    assert not check.ok and check.details == result["reference_problems"]


def test_a_rewritten_snapshot_header_is_caught(snapshot):
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # run pending checks so the table can be altered
        cursor.execute("ALTER TABLE proofs_liabilitysnapshot DISABLE TRIGGER ALL")
        cursor.execute('UPDATE proofs_liabilitysnapshot SET root_sums = \'["0.00000000", "0.000000"]\'')
        cursor.execute("ALTER TABLE proofs_liabilitysnapshot ENABLE TRIGGER ALL")

    code, result = verify_json()

    assert code == 1
    assert result["reference_problems"] == [
        {"reference": f"snapshot {snapshot.id}", "height": 0, "problem": "its hash does not match its document"}
    ]


# Refusals: nothing is signed over balances the postings do not account for -------------------------


def _user_account(user, asset, kind="user_available") -> Account:
    return Account.objects.get(owner=user, asset=asset, kind=kind)


def test_a_snapshot_is_refused_when_a_stored_balance_differs_from_its_postings(funded, btc):
    account = _user_account(funded[0], btc)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_account SET balance = balance + 1 WHERE id = %s", [account.id])

    with pytest.raises(CommandError) as refused:
        call_command("liabilities_snapshot")

    assert str(refused.value) == (
        "No snapshot taken: 1 customer account(s) have a stored balance that is not the sum of their postings "
        f"(run manage.py reconcile): account {account.id} (user {funded[0].id}, BTC user_available): "
        "stored 1.50000000, postings 0.50000000."
    )
    with pytest.raises(InvalidState, match=f"account {account.id} "):
        liabilities_snapshot_scheduled()  # what beat runs daily
    assert not LiabilitySnapshot.objects.exists() and not LiabilityNode.objects.exists()


def test_a_refusal_names_the_first_five_mismatched_accounts_and_counts_the_rest(funded, btc):
    """A fixture written without postings had its 1,000 accounts spelled out in one message (bench/liabilities.py)."""
    others = [UserFactory(username=f"more{n}") for n in range(3)]
    for user in others:
        fund(user, btc, "0.1")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_account SET balance = balance + 1 WHERE kind = 'user_available' RETURNING id")
        bumped = sorted(row[0] for row in cursor.fetchall())

    with pytest.raises(InvalidState) as refused:
        liabilities_snapshot_take()

    message = str(refused.value)
    assert len(bumped) == 7
    assert message.startswith("No snapshot taken: 7 customer account(s) have a stored balance")
    assert [f"account {account_id} " in message for account_id in bumped] == [True] * 5 + [False] * 2
    assert message.endswith("; and 2 more.")


def test_a_negative_balance_is_a_clean_refusal_not_a_traceback(funded, btc):
    """Stored balance and postings agree, both negative (rows rewritten with the CHECK constraint dropped)."""
    account = _user_account(funded[1], btc)
    posting = Posting.objects.get(account=account)
    other = Posting.objects.exclude(id=posting.id).get(entry_id=posting.entry_id)
    as_superuser_without_triggers(
        ("ALTER TABLE ledger_account DROP CONSTRAINT account_user_balance_not_negative", []),
        ("UPDATE ledger_posting SET amount = -amount, balance_after = -balance_after WHERE id = %s", [posting.id]),
        ("UPDATE ledger_posting SET amount = -amount WHERE id = %s", [other.id]),
        ("UPDATE ledger_account SET balance = -balance WHERE id = %s", [account.id]),
    )

    with pytest.raises(CommandError, match=f"No snapshot taken: user {funded[1].id} has a balance no leaf can hold"):
        call_command("liabilities_snapshot")

    assert not LiabilitySnapshot.objects.exists()


def test_a_withdrawal_custody_has_sent_is_no_shortfall_on_the_solvency_screen(db, usdt, btc, user):
    """Break-it review: a snapshot taken while a withdrawal was in flight (custody had sent the coins, the ledger still
    held them for the customer) flagged "LIABILITIES EXCEED CUSTODY" on healthy books."""
    from apps.proofs.selectors import snapshot_solvency
    from apps.wallets.custody.simnet import new_address
    from apps.wallets.services import withdrawal_request, withdrawal_submit
    from apps.wallets.tests.factories import book_address, deposit_through_custody

    Asset.objects.filter(pk=btc.pk).update(withdrawal_auto_approve_limit=Decimal(1), withdrawal_daily_limit=Decimal(1))
    deposit_through_custody(user, btc, "0.5")
    address = book_address(user, btc, new_address()).address
    withdrawal = withdrawal_request(user_id=user.id, asset_code="BTC", amount="0.3", address=address)
    withdrawal_submit(withdrawal_id=withdrawal.pk)  # custody sends it; its completion is not recorded yet
    journal_seal()

    snapshot = liabilities_snapshot_take()

    [btc_row, usdt_row] = snapshot_solvency(snapshot)
    network_fee = Decimal(snapshot.custody_in_flight["BTC"]) - Decimal("0.3")
    assert Decimal(snapshot.custody_holdings["BTC"]) == Decimal("0.2") - network_fee
    assert (btc_row.asset, btc_row.liabilities, btc_row.custody, btc_row.short) == (
        "BTC",
        Decimal("0.5"),
        Decimal("0.5"),
        False,
    )
    assert snapshot.custody_in_flight == {"BTC": snapshot.custody_in_flight["BTC"], "USDT": "0.000000"}
    assert not usdt_row.short


def test_a_withdrawal_completed_after_the_latest_block_is_no_shortfall_either(db, usdt, btc, user):
    """Break-it review: the liabilities stand at the latest sealed block, custody's report at the moment; a withdrawal
    completed in between (not sealed yet) showed as a shortfall."""
    from apps.proofs.selectors import snapshot_solvency
    from apps.wallets.custody.simnet import new_address
    from apps.wallets.services import withdrawal_request, withdrawal_submit
    from apps.wallets.tests.factories import book_address, deliver_custody_callbacks, deposit_through_custody

    Asset.objects.filter(pk=btc.pk).update(withdrawal_auto_approve_limit=Decimal(1), withdrawal_daily_limit=Decimal(1))
    deposit_through_custody(user, btc, "0.5")
    journal_seal()  # the block: 0.5 BTC owed, 0.5 held by custody
    address = book_address(user, btc, new_address()).address
    withdrawal = withdrawal_request(user_id=user.id, asset_code="BTC", amount="0.3", address=address)
    withdrawal_submit(withdrawal_id=withdrawal.pk)
    deliver_custody_callbacks()  # completed: custody and the ledger both paid it out, after the block

    snapshot = liabilities_snapshot_take()

    [btc_row, _] = snapshot_solvency(snapshot)
    assert Decimal(snapshot.custody_holdings["BTC"]) < Decimal("0.2")  # 0.2 less custody's network fee
    assert (btc_row.liabilities, btc_row.custody, btc_row.short) == (Decimal("0.5"), Decimal("0.5"), False)
