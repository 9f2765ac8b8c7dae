"""Operators' writes: reconciliation runs, maker-checker adjustments, the audit log."""

from collections.abc import Sequence
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from apps.ledger.errors import DomainError, InvalidState, NotFound, PermissionDenied
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import Leg, adjustment_legs_validate, adjustment_post
from apps.ledger.transactions import retrying_atomic
from apps.wallets.models import Withdrawal
from apps.wallets.services import withdrawal_approve, withdrawal_reject

from .models import Adjustment, AdjustmentStatus, AuditLogEntry, ReconciliationRun


def audit_record(
    *, actor_id: int, action: str, object_type: str, object_id: object, before: dict, after: dict
) -> AuditLogEntry:
    """Append who did ``action`` to ``object_type`` ``object_id``, with its state before and after (JSON-able dicts)."""
    return AuditLogEntry.objects.create(
        actor_id=actor_id, action=action, object_type=object_type, object_id=str(object_id), before=before, after=after
    )


def reconciliation_run(*, triggered_by_id: int | None = None) -> ReconciliationRun:
    """Run every invariant check on one snapshot and keep the result (one row per run).

    ``triggered_by_id`` is the operator who asked for it, or None for the hourly schedule.
    """
    started_at = timezone.now()
    report = reconcile()
    return ReconciliationRun.objects.create(
        started_at=started_at,
        finished_at=timezone.now(),
        ok=report.ok,
        report=report.as_dict(),
        triggered_by_id=triggered_by_id,
    )


def _adjustment_state(adjustment: Adjustment) -> dict:
    return {"status": adjustment.status, "legs": adjustment.legs, "memo": adjustment.memo, "entry": adjustment.entry_id}


@transaction.atomic
def adjustment_draft(*, author_id: int, memo: str, legs: Sequence[Leg]) -> Adjustment:
    """Draft a manual adjustment: ``legs`` (signed amounts, debit positive, each in its account's asset).

    The legs must balance per asset, be exact at each asset's precision, include an
    ``equity`` account (DESIGN.md section 4) and leave held funds alone. Nothing moves until
    another operator approves.
    Raises :class:`DomainError` (memo), :class:`UnbalancedEntry`, :class:`InvalidAmount`, :class:`NotFound`.
    """
    if not memo.strip():
        raise DomainError("A reason is required.", fields={"memo": "A reason is required."})
    adjustment_legs_validate(legs)
    adjustment = Adjustment.objects.create(
        memo=memo.strip(),
        legs=[{"account": leg.account_id, "amount": str(leg.amount)} for leg in legs],
        created_by_id=author_id,
    )
    audit_record(
        actor_id=author_id,
        action="adjustment.draft",
        object_type="backoffice.adjustment",
        object_id=adjustment.id,
        before={},
        after=_adjustment_state(adjustment),
    )
    return adjustment


def _lock_draft(adjustment_id: int, operator_id: int) -> Adjustment:
    adjustment = Adjustment.objects.select_for_update().filter(id=adjustment_id).first()
    if adjustment is None:
        raise NotFound("No such adjustment.")
    if adjustment.status != AdjustmentStatus.DRAFT:
        raise InvalidState(f"Adjustment #{adjustment.id} is already {adjustment.get_status_display().lower()}.")
    if adjustment.created_by_id == operator_id:
        raise PermissionDenied("An adjustment must be approved or rejected by another operator than its author.")
    return adjustment


@retrying_atomic
def adjustment_approve(*, adjustment_id: int, approver_id: int) -> Adjustment:
    """Approve a draft and post it through the ledger (key ``adjustment:<id>``); the approver is recorded.

    State-guarded under a row lock: approving twice raises :class:`InvalidState`; the
    author approving raises :class:`PermissionDenied`.
    """
    adjustment = _lock_draft(adjustment_id, approver_id)
    before = _adjustment_state(adjustment)
    entry = adjustment_post(
        adjustment_id=str(adjustment.id),
        legs=[Leg(leg["account"], Decimal(leg["amount"])) for leg in adjustment.legs],
        memo=adjustment.memo,
        operator_id=approver_id,
    )
    adjustment.status = AdjustmentStatus.APPROVED
    adjustment.decided_by_id = approver_id
    adjustment.decided_at = timezone.now()
    adjustment.entry_id = entry.id
    adjustment.save(update_fields=["status", "decided_by", "decided_at", "entry"])
    audit_record(
        actor_id=approver_id,
        action="adjustment.approve",
        object_type="backoffice.adjustment",
        object_id=adjustment.id,
        before=before,
        after=_adjustment_state(adjustment),
    )
    return adjustment


@retrying_atomic
def adjustment_reject(*, adjustment_id: int, approver_id: int, note: str) -> Adjustment:
    """Reject a draft with a ``note`` saying why; nothing is posted. Guards as :func:`adjustment_approve`."""
    if not note.strip():
        raise DomainError("A reason is required to reject.", fields={"note": "A reason is required."})
    adjustment = _lock_draft(adjustment_id, approver_id)
    before = _adjustment_state(adjustment)
    adjustment.status = AdjustmentStatus.REJECTED
    adjustment.decided_by_id = approver_id
    adjustment.decided_at = timezone.now()
    adjustment.decision_note = note.strip()
    adjustment.save(update_fields=["status", "decided_by", "decided_at", "decision_note"])
    audit_record(
        actor_id=approver_id,
        action="adjustment.reject",
        object_type="backoffice.adjustment",
        object_id=adjustment.id,
        before=before,
        after=_adjustment_state(adjustment),
    )
    return adjustment


@retrying_atomic
def adjustment_withdraw(*, adjustment_id: int, author_id: int) -> Adjustment:
    """The author withdraws their own draft (a mistake, a duplicate); nothing is posted, the audit log records it.

    State-guarded under a row lock: raises :class:`InvalidState` once it is decided or withdrawn,
    :class:`PermissionDenied` for anyone but its author, :class:`NotFound`.
    """
    adjustment = Adjustment.objects.select_for_update().filter(id=adjustment_id).first()
    if adjustment is None:
        raise NotFound("No such adjustment.")
    if adjustment.created_by_id != author_id:
        raise PermissionDenied("Only its author can withdraw a draft adjustment; others approve or reject it.")
    if adjustment.status != AdjustmentStatus.DRAFT:
        raise InvalidState(f"Adjustment #{adjustment.id} is already {adjustment.get_status_display().lower()}.")
    before = _adjustment_state(adjustment)
    adjustment.status = AdjustmentStatus.WITHDRAWN
    adjustment.decided_at = timezone.now()
    adjustment.save(update_fields=["status", "decided_at"])
    audit_record(
        actor_id=author_id,
        action="adjustment.withdraw",
        object_type="backoffice.adjustment",
        object_id=adjustment.id,
        before=before,
        after=_adjustment_state(adjustment),
    )
    return adjustment


def _withdrawal_state(withdrawal: Withdrawal) -> dict:
    return {
        "status": withdrawal.status,
        "hold_remaining": str(withdrawal.hold_remaining),
        "decided_by": withdrawal.decided_by_id,
        "reason": withdrawal.reason,
    }


@retrying_atomic
def withdrawal_decide(*, withdrawal_id: int, operator_id: int, approve: bool, reason: str = "") -> Withdrawal:
    """An operator approves (``approve=True``) or rejects (with a ``reason``) a withdrawal awaiting approval.

    Calls :func:`apps.wallets.services.withdrawal_approve` / ``withdrawal_reject`` (state-guarded,
    permission ``wallets.approve_withdrawal``) and records the decision in the audit log in the
    same transaction. Raises what they raise: :class:`InvalidState` for a second decision,
    :class:`PermissionDenied`, :class:`NotFound`, :class:`DomainError` (reason).
    """
    before = Withdrawal.objects.filter(id=withdrawal_id).first()
    if approve:
        withdrawal = withdrawal_approve(withdrawal_id=withdrawal_id, operator_id=operator_id)
    else:
        withdrawal = withdrawal_reject(withdrawal_id=withdrawal_id, operator_id=operator_id, reason=reason)
    audit_record(
        actor_id=operator_id,
        action="withdrawal.approve" if approve else "withdrawal.reject",
        object_type="wallets.withdrawal",
        object_id=withdrawal_id,
        before=_withdrawal_state(before),
        after=_withdrawal_state(withdrawal),
    )
    return withdrawal
