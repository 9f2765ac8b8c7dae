"""Reconciliation's backing rule for manual adjustments (invariant 8): every ``adjustment`` entry is the entry of
an approved adjustment, posting its legs."""

from decimal import Decimal

import pytest
from django.db import connection

from apps.backoffice.services import adjustment_approve, adjustment_draft, adjustment_reject
from apps.ledger.models import AccountKind, EntryReason
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import Leg, system_account, user_account
from apps.ledger.tests.forgery import backing_failures, flagged_entries, forge, system_to_user
from apps.ledger.tests.seal_helpers import as_superuser_without_triggers


@pytest.fixture
def adjustments(operator, approver, user, usdt):
    """An approved adjustment crediting the user 25 USDT, a rejected one and a draft."""
    equity = system_account(AccountKind.EQUITY, usdt)
    legs = [Leg(equity.id, Decimal("25")), Leg(user_account(user.id, usdt).id, Decimal("-25"))]
    approved = adjustment_draft(author_id=operator.id, memo="goodwill, ticket 7", legs=legs)
    adjustment_approve(adjustment_id=approved.id, approver_id=approver.id)
    rejected = adjustment_draft(author_id=operator.id, memo="goodwill, ticket 8", legs=legs)
    adjustment_reject(adjustment_id=rejected.id, approver_id=approver.id, note="Duplicate of ticket 7.")
    draft = adjustment_draft(author_id=operator.id, memo="goodwill, ticket 9", legs=legs)
    approved.refresh_from_db()
    return {"approved": approved, "rejected": rejected, "draft": draft}


def test_approved_rejected_and_draft_adjustments_are_backed(adjustments):
    assert backing_failures(reconcile()) == {}


def test_an_adjustment_posted_without_a_record_is_flagged(adjustments, user, usdt):
    entry = forge(reason=EntryReason.ADJUSTMENT, legs=system_to_user(AccountKind.EQUITY, user, usdt, "1000"))

    assert flagged_entries(reconcile()) == {entry.id: "no adjustment was posted as this entry"}


def test_an_adjustment_reusing_an_approved_ones_reference_is_flagged(adjustments, user, usdt):
    approved = adjustments["approved"]
    entry = forge(
        reason=EntryReason.ADJUSTMENT,
        legs=system_to_user(AccountKind.EQUITY, user, usdt, "25"),
        reference_type="adjustment",
        reference_id=str(approved.id),
    )

    assert backing_failures(reconcile()) == {
        "adjustment_entries_backed": [
            {
                "entry": entry.id,
                "idempotency_key": entry.idempotency_key,
                "reason": "adjustment",
                "reference_type": "adjustment",
                "reference_id": str(approved.id),
                "problem": "no adjustment was posted as this entry",
            }
        ]
    }


@pytest.mark.parametrize("which", ["rejected", "draft"])
def test_an_adjustment_posted_under_the_key_of_one_never_approved_is_flagged(adjustments, user, usdt, which):
    adjustment = adjustments[which]
    entry = forge(
        reason=EntryReason.ADJUSTMENT,
        legs=system_to_user(AccountKind.EQUITY, user, usdt, "25"),
        idempotency_key=f"adjustment:{adjustment.id}",
        reference_type="adjustment",
        reference_id=str(adjustment.id),
    )

    assert flagged_entries(reconcile()) == {entry.id: "no adjustment was posted as this entry"}


def test_an_approved_adjustment_whose_legs_changed_after_posting_is_flagged(adjustments):
    approved = adjustments["approved"]
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE backoffice_adjustment SET legs = jsonb_set(legs, '{1,amount}', '\"-2500\"') WHERE id = %s",
            [approved.id],
        )

    assert flagged_entries(reconcile()) == {approved.entry_id: "the postings are not the adjustment's legs"}


@pytest.mark.parametrize(
    "rewrite",
    [
        "UPDATE ledger_journalentry SET metadata = jsonb_set(metadata, '{memo}', '\"rewritten\"') WHERE id = %s",
        "UPDATE ledger_journalentry SET created_by_id = (SELECT created_by_id FROM backoffice_adjustment a "
        "WHERE a.entry_id = ledger_journalentry.id) WHERE id = %s",
    ],
    ids=["memo", "approver"],
)
def test_an_adjustment_entry_whose_memo_or_approver_was_rewritten_is_flagged(adjustments, rewrite):
    """Break-it review: the memo and the approver (``created_by``) of a posted adjustment were rewritten past the
    triggers; the seal's digest covers neither (PROOFS.md section 1), and reconcile passed."""
    approved = adjustments["approved"]
    as_superuser_without_triggers((rewrite, [approved.entry_id]))

    assert flagged_entries(reconcile()) == {approved.entry_id: "not posted by the adjustment's approver with its memo"}


def test_an_adjustment_of_a_small_amount_written_with_an_exponent_is_backed(operator, approver, user, btc):
    """``str(Decimal("0.00000001"))`` is ``1E-8``: the legs as drafted still match the postings."""
    equity = system_account(AccountKind.EQUITY, btc)
    legs = [Leg(equity.id, Decimal("0.00000001")), Leg(user_account(user.id, btc).id, Decimal("-0.00000001"))]
    draft = adjustment_draft(author_id=operator.id, memo="dust", legs=legs)
    adjustment_approve(adjustment_id=draft.id, approver_id=approver.id)

    assert backing_failures(reconcile()) == {}
