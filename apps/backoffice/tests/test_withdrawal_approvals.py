"""The withdrawal approval queue in the admin, driven with Django's test client."""

import threading
import time
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.utils import timezone

from apps.audit.models import AuditLogEntry
from apps.backoffice.services import withdrawal_decide
from apps.ledger.services import user_accounts
from apps.wallets.custody.simnet import new_address
from apps.wallets.models import Withdrawal, WithdrawalStatus
from apps.wallets.services import withdrawal_cancel, withdrawal_request
from apps.wallets.tests.conftest import make_operator
from apps.wallets.tests.factories import book_address, deposit_through_custody


@pytest.fixture
def awaiting(usdt, user):
    """150 USDT to withdraw, above the auto-approval limit of 100, from a user who deposited 1,000."""
    type(usdt).objects.filter(pk=usdt.pk).update(
        withdrawal_auto_approve_limit=Decimal(100), withdrawal_daily_limit=Decimal(10_000)
    )
    deposit_through_custody(user, usdt, "1000")
    address = book_address(user, usdt, new_address()).address
    withdrawal = withdrawal_request(user_id=user.id, asset_code="USDT", amount="150", address=address)
    assert withdrawal.status == WithdrawalStatus.AWAITING_APPROVAL
    return withdrawal


def decide(client, withdrawal, decision, reason="", **kwargs):
    return client.post(
        f"/admin/backoffice/withdrawalapproval/{withdrawal.id}/decide/",
        {"decision": decision, "reason": reason},
        **kwargs,
    )


def test_the_queue_shows_the_withdrawal_with_the_users_balances(client, approver, awaiting, admin_login):
    admin_login(approver)
    assert str(awaiting.id) in client.get("/admin/backoffice/withdrawalapproval/").content.decode()

    page = client.get(f"/admin/backoffice/withdrawalapproval/{awaiting.id}/change/").content.decode()

    cell = '<td style="text-align:right;font-family:monospace"><span class="amount" title="{}">{}</span></td>'
    balances = page.split("<h2>Balances of")[1].split("</table>")[0]
    shown = f"<td>USDT</td>{cell.format(850, 850)}\n      {cell.format(150, 150)}{cell.format(1000, '1,000')}"
    assert shown in balances  # at the ledger precision (trailing zeros trimmed), the exact amount in the tooltip
    recent = page.split("<h2>Recent withdrawals</h2>")[1].split("</table>")[0]
    assert timezone.localtime(awaiting.created_at).strftime("<td>%Y-%m-%d %H:%M:%S UTC</td>") in recent
    assert "150.000000 USDT (fee" in page  # the amount decided on stays exact, at the ledger precision
    assert 'value="approve"' in page


def test_the_queue_lists_amounts_at_the_assets_precision_not_18_places(client, approver, awaiting, admin_login):
    admin_login(approver)
    listing = client.get("/admin/backoffice/withdrawalapproval/").content.decode()

    assert '<span class="amount" title="150 USDT">150 USDT</span>' in listing
    assert "150.000000000000000000" not in listing


def test_a_staff_user_outside_approvers_cannot_decide(client, operator, awaiting):
    client.force_login(operator)
    page = client.get(f"/admin/backoffice/withdrawalapproval/{awaiting.id}/change/").content.decode()
    assert 'value="approve"' not in page

    assert decide(client, awaiting, "approve").status_code == 403
    assert Withdrawal.objects.get(id=awaiting.id).status == WithdrawalStatus.AWAITING_APPROVAL
    assert not AuditLogEntry.objects.filter(object_type="wallets.withdrawal").exists()


def test_approving_twice_submits_once_and_is_audited_once(
    client, approver, awaiting, django_capture_on_commit_callbacks, admin_login
):
    admin_login(approver)
    with django_capture_on_commit_callbacks() as queued:
        decide(client, awaiting, "approve")
        second = decide(client, awaiting, "approve", follow=True)

    assert Withdrawal.objects.get(id=awaiting.id).status == WithdrawalStatus.APPROVED
    assert [c.__qualname__ for c in queued] == ["ring", "task_send"]  # one submission to custody queued
    # the double click is refused, politely, naming the withdrawal once
    shown = [str(message) for message in second.context["messages"]]
    assert shown == [f"Withdrawal #{awaiting.id} approved.", f"Withdrawal #{awaiting.id} is already approved."]
    audit = AuditLogEntry.objects.get(object_type="wallets.withdrawal", object_id=str(awaiting.id))
    assert (audit.actor, audit.action) == (approver, "withdrawal.approve")
    assert audit.before["status"] == "awaiting_approval" and audit.after["status"] == "approved"


def test_a_rejected_withdrawal_releases_once_and_cannot_be_approved(
    client, approver, awaiting, usdt, user, admin_login
):
    admin_login(approver)
    assert decide(client, awaiting, "reject", reason="").status_code == 302
    assert Withdrawal.objects.get(id=awaiting.id).status == WithdrawalStatus.AWAITING_APPROVAL  # a reason is required

    decide(client, awaiting, "reject", reason="address on a sanctions list")
    decide(client, awaiting, "approve")

    withdrawal = Withdrawal.objects.get(id=awaiting.id)
    available, held = user_accounts(user.id, usdt)
    assert withdrawal.status == WithdrawalStatus.REJECTED
    assert (available.balance, held.balance) == (Decimal("1000"), Decimal("0"))
    decisions = AuditLogEntry.objects.filter(object_type="wallets.withdrawal", object_id=str(awaiting.id))
    assert list(decisions.values_list("action", flat=True)) == ["withdrawal.reject"]


def test_approving_a_cancelled_withdrawal_names_it_once(client, approver, awaiting, user, admin_login):
    withdrawal_cancel(withdrawal_id=awaiting.id, user_id=user.id)
    admin_login(approver)

    response = decide(client, awaiting, "approve", follow=True)

    shown = [str(message) for message in response.context["messages"]]
    assert shown == [f"Withdrawal #{awaiting.id} is cancelled; it cannot become approved."]


def test_approve_selected_action_shows_each_withdrawal_before_approving(client, approver, awaiting, admin_login):
    """Break-it review: the action approved at one click, with neither the address nor a risk signal shown."""
    admin_login(approver)
    selected = {"action": "approve_selected", "_selected_action": [awaiting.id]}

    shown = client.post("/admin/backoffice/withdrawalapproval/", selected)

    assert shown.status_code == 200
    page = shown.content.decode()
    assert f"#{awaiting.id}" in page and awaiting.address in page
    assert "⚠ first use of this address by this customer" in page
    assert 'name="confirm" value="yes"' in page
    assert Withdrawal.objects.get(id=awaiting.id).status == WithdrawalStatus.AWAITING_APPROVAL

    client.post("/admin/backoffice/withdrawalapproval/", {**selected, "confirm": "yes"})
    assert Withdrawal.objects.get(id=awaiting.id).status == WithdrawalStatus.APPROVED


@pytest.mark.parametrize("decision", ["bogus", ""])
def test_an_unknown_decision_decides_nothing(client, approver, awaiting, admin_login, decision):
    admin_login(approver)
    response = decide(client, awaiting, decision, reason="why not", follow=True)
    assert "Choose approve or reject." in response.content.decode()
    assert Withdrawal.objects.get(id=awaiting.id).status == WithdrawalStatus.AWAITING_APPROVAL


@pytest.mark.parametrize(
    "path", ["/admin/backoffice/withdrawalapproval/abc/change/", "/admin/backoffice/withdrawalapproval/abc/decide/"]
)
def test_a_malformed_withdrawal_id_is_a_404(client, approver, admin_login, path):
    admin_login(approver)
    assert client.get(path, follow=True).status_code == 404  # the admin may first redirect to .../change/
    assert client.post(path, {"decision": "approve"}, follow=True).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_a_rejection_racing_an_approval_audits_the_approved_state_it_overturned(awaiting):
    """Break-it review: the rejection read the withdrawal before waiting for the approval's lock, and audited it as
    awaiting approval when it rejected an approved one."""
    first, second = make_operator("first"), make_operator("second")
    approved = threading.Event()

    def approve() -> None:
        try:
            with transaction.atomic():
                withdrawal_decide(withdrawal_id=awaiting.id, operator_id=first.id, approve=True)
                approved.set()
                time.sleep(0.5)  # the rejection meets the row locked, and reads it meanwhile without a lock
        finally:
            connection.close()

    approving = threading.Thread(target=approve)
    approving.start()
    assert approved.wait(timeout=30)
    withdrawal_decide(withdrawal_id=awaiting.id, operator_id=second.id, approve=False, reason="seen too late")
    approving.join(timeout=30)

    audited = AuditLogEntry.objects.filter(object_type="wallets.withdrawal", object_id=str(awaiting.id)).order_by("id")
    assert [(row.action, row.before["status"], row.after["status"]) for row in audited] == [
        ("withdrawal.approve", "awaiting_approval", "approved"),
        ("withdrawal.reject", "approved", "rejected"),
    ]
