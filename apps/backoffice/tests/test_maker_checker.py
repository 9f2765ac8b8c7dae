"""Every maker-checker decision (adjustments, fee changes, second-factor resets) through the one decision helper:
the request's stored decision and its audit rows, to the letter, for approving and for rejecting."""

from decimal import Decimal

import pytest

from apps.accounts.tests.otp import enrol_device
from apps.audit.models import AuditLogEntry
from apps.backoffice.models import Adjustment, ChangeStatus, FeeChange, SecondFactorReset
from apps.backoffice.services import (
    adjustment_approve,
    adjustment_draft,
    adjustment_reject,
    fee_change_approve,
    fee_change_draft,
    fee_change_reject,
    second_factor_reset_approve,
    second_factor_reset_reject,
    second_factor_reset_request,
)
from apps.core.errors import DomainError
from apps.ledger.models import AccountKind
from apps.ledger.services import Leg, system_account, user_account
from apps.ledger.tests.factories import UserFactory
from apps.orders.models import FeeSchedule


def decisions(object_type: str, object_id) -> list[tuple]:
    """The audit rows of the decisions on one object, oldest first."""
    rows = AuditLogEntry.objects.filter(
        object_type=object_type, object_id=str(object_id), action__regex=r"\.(approve|reject)$"
    ).order_by("id")
    return [(row.action, row.actor_id, row.before, row.after) for row in rows]


@pytest.fixture
def legs(usdt, user):
    equity = system_account(AccountKind.EQUITY, usdt)
    return [Leg(equity.id, Decimal("25")), Leg(user_account(user.id, usdt).id, Decimal("-25"))]


@pytest.mark.parametrize("approve", [True, False])
def test_an_adjustment_decision_is_stored_and_audited(operator, approver, legs, approve):
    adjustment = adjustment_draft(author_id=operator.id, memo="goodwill", legs=legs)
    state = {"status": "draft", "legs": adjustment.legs, "memo": "goodwill", "entry": None}

    if approve:
        adjustment_approve(adjustment_id=adjustment.id, approver_id=approver.id)
    else:
        adjustment_reject(adjustment_id=adjustment.id, approver_id=approver.id, note="  no ticket  ")

    adjustment = Adjustment.objects.get()
    assert (adjustment.status, adjustment.decided_by, adjustment.decision_note) == (
        ("approved", approver, "") if approve else ("rejected", approver, "no ticket")
    )
    assert adjustment.decided_at is not None and (adjustment.entry_id is not None) == approve
    after = {**state, "status": adjustment.status, "entry": adjustment.entry_id}
    assert decisions("backoffice.adjustment", adjustment.id) == [
        (f"adjustment.{'approve' if approve else 'reject'}", approver.id, state, after)
    ]


def test_a_fee_change_approval_audits_the_change_then_the_schedule(operator, approver):
    change = fee_change_draft(
        author_id=operator.id, kind="create", memo="vip", name="VIP", maker_rate="0", taker_rate="0.0005"
    )
    state = {
        "status": "draft",
        "kind": "create",
        "schedule": None,
        "name": "VIP",
        "maker_rate": "0",
        "taker_rate": "0.0005",
        "user": None,
        "memo": "vip",
    }

    fee_change_approve(change_id=change.id, approver_id=approver.id)

    vip = FeeSchedule.objects.get(name="VIP")
    change.refresh_from_db()
    assert (change.status, change.decided_by, change.schedule, change.decision_note) == ("approved", approver, vip, "")
    assert decisions("backoffice.feechange", change.id) == [
        ("fee_change.approve", approver.id, state, {**state, "status": "approved", "schedule": vip.id})
    ]
    schedule_row = AuditLogEntry.objects.order_by("id").last()
    assert (schedule_row.action, schedule_row.actor_id, schedule_row.object_type, schedule_row.object_id) == (
        "fee_schedule.create",
        approver.id,
        "orders.feeschedule",
        str(vip.id),
    )
    assert (schedule_row.before, schedule_row.after) == (
        {"fee_change": change.id},
        {"name": "VIP", "maker_rate": "0", "taker_rate": "0.0005", "is_default": False, "fee_change": change.id},
    )


def test_a_fee_change_rejection_needs_a_reason_and_applies_nothing(operator, approver):
    change = fee_change_draft(
        author_id=operator.id, kind="create", memo="vip", name="VIP", maker_rate="0", taker_rate="0"
    )

    with pytest.raises(DomainError) as refused:
        fee_change_reject(change_id=change.id, approver_id=approver.id, note=" ")
    fee_change_reject(change_id=change.id, approver_id=approver.id, note="too generous")

    assert refused.value.fields == {"note": "A reason is required."}
    change = FeeChange.objects.get()
    assert (change.status, change.decision_note, change.schedule) == (ChangeStatus.REJECTED, "too generous", None)
    assert not FeeSchedule.objects.filter(name="VIP").exists()
    [(action, actor, before, after)] = decisions("backoffice.feechange", change.id)
    assert (action, actor, before["status"], after["status"]) == ("fee_change.reject", approver.id, "draft", "rejected")


@pytest.mark.parametrize("approve", [True, False])
def test_a_second_factor_reset_decision_is_audited_on_the_customer(operator, approver, approve):
    customer = UserFactory(username="cleo")
    device = enrol_device(customer)
    reset = second_factor_reset_request(user_id=customer.id, operator_id=operator.id, reason="lost phone")

    if approve:
        second_factor_reset_approve(reset_id=reset.id, approver_id=approver.id)
    else:
        second_factor_reset_reject(reset_id=reset.id, approver_id=approver.id, note="not them")

    reset = SecondFactorReset.objects.get()
    assert (reset.status, reset.decided_by, reset.decision_note) == (
        ("approved", approver, "") if approve else ("rejected", approver, "not them")
    )
    state = {"status": "draft", "user": customer.id, "reason": "lost phone", "reset": reset.id}
    removed = [device.persistent_id] if approve else []
    assert decisions("auth.user", customer.id) == [
        (
            f"second_factor_reset.{'approve' if approve else 'reject'}",
            approver.id,
            state,
            {**state, "status": reset.status, "removed_devices": removed},
        )
    ]
