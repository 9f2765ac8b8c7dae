"""The customer screen in the admin: what it shows, freezing trading, blocking withdrawals, resetting the
second factor (maker-checker), every action audited with its reason."""

from decimal import Decimal

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.accounts.errors import TradingFrozen, WithdrawalsBlocked
from apps.accounts.models import AccountRestriction
from apps.accounts.restrictions import (
    account_trading_freeze,
    account_withdrawals_block,
    account_withdrawals_block_by_system,
    account_withdrawals_unblock,
)
from apps.accounts.selectors import account_restriction
from apps.audit.models import AuditLogEntry
from apps.backoffice.models import ChangeStatus, SecondFactorReset, WithdrawalsUnblock
from apps.backoffice.services import (
    second_factor_reset_approve,
    second_factor_reset_request,
    withdrawals_unblock_approve,
    withdrawals_unblock_reject,
    withdrawals_unblock_request,
)
from apps.backoffice.tests.logins import login_with_second_factor
from apps.core.errors import DomainError, InvalidState, PermissionDenied
from apps.ledger.selectors import available_balance
from apps.ledger.tests.factories import UserFactory
from apps.orders.models import OrderStatus
from apps.orders.services import market_create, order_cancel, order_place
from apps.wallets.custody.simnet import new_address
from apps.wallets.models import WithdrawalStatus
from apps.wallets.services import withdrawal_approve, withdrawal_request, withdrawal_submit
from apps.wallets.tests.factories import book_address, deposit_through_custody
from exchange.tests.html import amt

D = Decimal


@pytest.fixture
def customer(usdt, btc):
    """A customer with 1,000 USDT deposited, an open order holding 100 of it, and a one-time password device."""
    customer = UserFactory(username="carla", email="carla@example.com")
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=D(100), withdrawal_daily_limit=D(10_000))
    deposit_through_custody(customer, usdt, "1000")
    market_create(
        base=btc,
        quote=usdt,
        tick_size=D("0.01"),
        step_size=D("0.0001"),
        min_qty=D("0.0001"),
        max_qty=D("100"),
        min_notional=D("1"),
    )
    order_place(user_id=customer.id, market="BTC-USDT", side="buy", price="1000", qty="0.1")
    TOTPDevice.objects.create(user=customer, name="phone", confirmed=True)
    return customer


def page(client, customer) -> str:
    response = client.get(f"/admin/backoffice/customer/{customer.id}/change/")
    assert response.status_code == 200
    return response.content.decode()


def restrict(client, customer, restriction, switch, reason="fraud review, ticket 31"):
    return client.post(
        f"/admin/backoffice/customer/{customer.id}/restrict/",
        {"restriction": restriction, "switch": switch, "reason": reason},
        follow=True,
    )


def audit(customer):
    rows = AuditLogEntry.objects.filter(object_type="auth.user", object_id=str(customer.id)).exclude(
        action__in=("login", "second_factor.enrol")
    )
    return list(rows.order_by("id").values_list("action", "actor__username"))


def booked(user) -> str:
    """A new address, active in the user's USDT address book."""
    return book_address(user, "USDT", new_address()).address


def test_the_customer_screen_shows_balances_orders_deposits_withdrawals_logins_and_second_factor(
    client, operator, customer
):
    withdrawal_request(user_id=customer.id, asset_code="USDT", amount="150", address=booked(customer))
    Client().post("/accounts/login/", {"username": "carla", "password": "wrong"})
    client.force_login(operator)

    html = page(client, customer)

    assert "carla@example.com" in html
    # At the ledger precision, exact in the tooltip: available; held by the order (100) and withdrawal (150).
    assert amt("750") in html and amt("250") in html
    assert ">1,000.00</td>" in html and amt("0.1") in html  # the open order's price at the tick, its quantity
    assert f"joined {timezone.localtime(customer.date_joined):%Y-%m-%d %H:%M:%S} UTC" in html  # seconds, zone
    assert "Awaiting approval" in html and "Credited" in html
    assert "TOTP device “phone”: confirmed" in html
    assert "<strong>failed</strong>" in html  # the failed log-in
    assert "Freeze trading" in html and "Block withdrawals" in html
    assert "Request a second-factor reset" in html


def test_the_customer_screen_shows_balances_to_the_ledger_precision_not_cut_to_display_places(
    client, operator, customer, usdt
):
    """USDT shows 2 places to traders; an operator saw 81,037.829410 as "81,037.82"."""
    type(usdt).objects.filter(pk=usdt.pk).update(display_decimals=2)
    deposit_through_custody(customer, usdt, "0.82941", txid="more")
    client.force_login(operator)

    html = page(client, customer)

    balances = html.split("<h2>Balances</h2>")[1].split("</table>")[0]
    assert amt("900.82941") in balances and amt("1000.82941", "1,000.82941") in balances


def test_staff_users_are_not_customers(client, operator, approver):
    """An operator's id on the customer screen (the audit log links every user there) leads to the operators' user
    page; the customer list leaves staff out, and a customer's actions refuse them (404, nothing changed)."""
    client.force_login(operator)
    response = client.get(f"/admin/backoffice/customer/{approver.id}/change/")
    assert (response.status_code, response.headers["Location"]) == (302, f"/admin/auth/user/{approver.id}/change/")
    assert "arno" not in client.get("/admin/backoffice/customer/").content.decode()

    assert restrict(client, approver, "trading", "on").status_code == 404
    reset = client.post(f"/admin/backoffice/customer/{approver.id}/second-factor-reset/", {"reason": "lost phone"})
    assert reset.status_code == 404
    assert not AccountRestriction.objects.filter(user=approver).exists()
    assert not SecondFactorReset.objects.exists()
    assert client.get("/admin/backoffice/customer/999999999/change/").status_code == 404


def test_freezing_trading_refuses_new_orders_keeps_cancels_and_is_audited(client, operator, customer):
    client.force_login(operator)
    assert "Trading frozen." not in restrict(client, customer, "trading", "on", reason="").content.decode()
    assert not customer.orders.filter(status=OrderStatus.CANCELLED).exists()

    response = restrict(client, customer, "trading", "on")

    assert "Trading restricted." in response.content.decode()
    assert "frozen" in page(client, customer)
    with pytest.raises(TradingFrozen):
        order_place(user_id=customer.id, market="BTC-USDT", side="buy", price="1000", qty="0.1")
    resting = customer.orders.get()
    assert order_cancel(order_id=resting.id, user_id=customer.id).status == OrderStatus.CANCELLED

    restrict(client, customer, "trading", "off", reason="review closed")
    assert order_place(user_id=customer.id, market="BTC-USDT", side="buy", price="1000", qty="0.1").status == "open"
    assert audit(customer) == [("account.trading_freeze", "olga"), ("account.trading_unfreeze", "olga")]
    freeze = AuditLogEntry.objects.get(action="account.trading_freeze")
    assert (freeze.before.get("trading_frozen"), freeze.after["trading_frozen"]) == (False, True)
    assert freeze.after["trading_reason"] == "fraud review, ticket 31"


def test_blocking_withdrawals_refuses_requests_and_approvals(client, operator, approver, customer, api_as):
    pending = withdrawal_request(user_id=customer.id, asset_code="USDT", amount="150", address=booked(customer))
    client.force_login(operator)
    restrict(client, customer, "withdrawals", "on")

    with pytest.raises(WithdrawalsBlocked):
        withdrawal_request(user_id=customer.id, asset_code="USDT", amount="10", address=booked(customer))
    api = api_as(customer, "withdraw").post(
        "/api/v1/withdrawals/", {"asset": "USDT", "amount": "10", "address": new_address()}, format="json"
    )
    assert (api.status_code, api.json()["error"]["code"]) == (403, "withdrawals_blocked")
    with pytest.raises(WithdrawalsBlocked):
        withdrawal_approve(withdrawal_id=pending.id, operator_id=approver.id)
    assert customer.withdrawals.get().status == WithdrawalStatus.AWAITING_APPROVAL
    approval_page = login_with_second_factor(Client(), approver).get(
        f"/admin/backoffice/withdrawalapproval/{pending.id}/change/"
    )
    assert "Withdrawals of this customer are blocked (fraud review, ticket 31)" in approval_page.content.decode()

    requested = restrict(client, customer, "withdrawals", "off", reason="documents received")
    assert [str(shown) for shown in requested.context["messages"]] == [
        "Lifting requested; another operator must approve it."
    ]
    with pytest.raises(WithdrawalsBlocked):  # still blocked: one operator asked, nobody approved yet
        withdrawal_approve(withdrawal_id=pending.id, operator_id=approver.id)
    unblock = WithdrawalsUnblock.objects.get()
    approved = login_with_second_factor(Client(), approver).post(
        f"/admin/backoffice/customer/withdrawals-unblock/{unblock.id}/decide/", {"decision": "approve"}, follow=True
    )
    assert "Approve lifting the block" not in approved.content.decode()
    assert withdrawal_approve(withdrawal_id=pending.id, operator_id=approver.id).status == WithdrawalStatus.APPROVED
    assert audit(customer) == [
        ("account.withdrawals_block", "olga"),
        ("withdrawals_unblock.request", "olga"),
        ("account.withdrawals_unblock", "arno"),
        ("withdrawals_unblock.approve", "arno"),
    ]


def test_lifting_a_withdrawals_block_takes_a_second_operator(operator, approver, customer):
    """Break-it review: one operator lifted a block set against an account takeover, and the customer's withdrawal
    went out at once. One asks, another who may approve decides; nobody lifts one alone, nor decides their own."""
    account_withdrawals_block(user_id=customer.id, operator_id=operator.id, blocked=True, reason="taken over")
    with pytest.raises(PermissionDenied):
        account_withdrawals_block(user_id=customer.id, operator_id=approver.id, blocked=False, reason="ok")
    with pytest.raises(PermissionDenied):
        account_withdrawals_unblock(
            user_id=customer.id, requested_by_id=approver.id, approver_id=approver.id, reason="ok"
        )
    unblock = withdrawals_unblock_request(user_id=customer.id, operator_id=approver.id, reason="documents received")
    with pytest.raises(InvalidState):
        withdrawals_unblock_request(user_id=customer.id, operator_id=operator.id, reason="again")
    with pytest.raises(PermissionDenied):  # its author
        withdrawals_unblock_approve(unblock_id=unblock.id, approver_id=approver.id)
    with pytest.raises(PermissionDenied):  # an operator who may not approve
        withdrawals_unblock_approve(unblock_id=unblock.id, approver_id=operator.id)
    assert account_restriction(user_id=customer.id).withdrawals_blocked

    second = UserFactory(username="bea", is_staff=True)
    second.groups.add(*Group.objects.filter(name__in=["operators", "approvers"]))
    withdrawals_unblock_approve(unblock_id=unblock.id, approver_id=second.id)

    assert not account_restriction(user_id=customer.id).withdrawals_blocked
    assert WithdrawalsUnblock.objects.get().status == ChangeStatus.APPROVED
    with pytest.raises(InvalidState):
        withdrawals_unblock_reject(unblock_id=unblock.id, approver_id=second.id, note="late")


def test_a_lift_asked_before_the_system_added_a_failed_deposit_to_the_block_is_not_approved(
    operator, approver, customer
):
    """Break-it review: a failed deposit left an operator's block as it was; approving a lift asked earlier for
    another reason freed the account, and its owner withdrew the coins that never arrived."""
    account_withdrawals_block(user_id=customer.id, operator_id=operator.id, blocked=True, reason="KYC expired.")
    unblock = withdrawals_unblock_request(user_id=customer.id, operator_id=operator.id, reason="KYC renewed")
    account_withdrawals_block_by_system(user_id=customer.id, reason="Deposit #7 was credited and reported failed.")
    restriction = account_restriction(user_id=customer.id)
    assert restriction.withdrawals_reason == "KYC expired. Deposit #7 was credited and reported failed."
    assert restriction.updated_by_id is None

    with pytest.raises(InvalidState, match="The restriction changed after this was asked"):
        withdrawals_unblock_approve(unblock_id=unblock.id, approver_id=approver.id)

    assert account_restriction(user_id=customer.id).withdrawals_blocked
    assert WithdrawalsUnblock.objects.get().status == ChangeStatus.DRAFT  # to reject; a new request is decided anew
    withdrawals_unblock_reject(unblock_id=unblock.id, approver_id=approver.id, note="stale")
    again = withdrawals_unblock_request(user_id=customer.id, operator_id=operator.id, reason="deposit 7 reversed")
    withdrawals_unblock_approve(unblock_id=again.id, approver_id=approver.id)
    assert not account_restriction(user_id=customer.id).withdrawals_blocked


def test_a_withdrawal_approved_before_the_block_waits_in_the_queue_where_it_can_only_be_rejected(
    client, operator, approver, customer
):
    withdrawal = withdrawal_request(user_id=customer.id, asset_code="USDT", amount="50", address=booked(customer))
    assert withdrawal.status == WithdrawalStatus.APPROVED  # within the auto-approval limit
    client.force_login(operator)
    restrict(client, customer, "withdrawals", "on")
    assert withdrawal_submit(withdrawal_id=withdrawal.id).status == WithdrawalStatus.APPROVED  # held back
    approver_client = login_with_second_factor(Client(), approver)

    queue = approver_client.get("/admin/backoffice/withdrawalapproval/").content.decode()
    approval_page = approver_client.get(f"/admin/backoffice/withdrawalapproval/{withdrawal.id}/change/")

    assert f"/admin/backoffice/withdrawalapproval/{withdrawal.id}/change/" in queue
    shown = approval_page.content.decode()
    assert "approved before the block and is held back, never sent" in shown
    assert 'value="Approve"' not in shown and 'value="Reject"' in shown
    approver_client.post(
        f"/admin/backoffice/withdrawalapproval/{withdrawal.id}/decide/",
        {"decision": "reject", "reason": "account taken over"},
    )
    rejected = customer.withdrawals.get()
    assert (rejected.status, rejected.reason) == (WithdrawalStatus.REJECTED, "account taken over")
    assert available_balance(user_id=customer.id, asset_id=rejected.asset_id) == D(900)  # 100 held by the order
    assert (
        f"/withdrawalapproval/{withdrawal.id}/change/"
        not in approver_client.get("/admin/backoffice/withdrawalapproval/").content.decode()
    )


@pytest.mark.parametrize(
    "reason",
    # Break-it review: a reason of U+3164 (a Hangul filler, a letter that renders as nothing) was accepted and audited
    # as blank, and U+2028 (a line separator) passed too.
    ["fraud\x00review", "fraud\x1b[2Jreview", "ok\u202etxt.exe", "\u200b\u200b", "\u3164", "a\u2028b", "\u2800\u2800"],
)
def test_a_reason_with_a_control_character_is_refused_and_nothing_is_written(client, operator, customer, reason):
    client.force_login(operator)

    response = restrict(client, customer, "withdrawals", "on", reason=reason)

    assert [str(shown) for shown in response.context["messages"]] == [
        "Control and invisible formatting characters are not allowed."
    ]
    assert not AccountRestriction.objects.filter(user=customer).exists()
    assert audit(customer) == []


def test_restrictions_need_the_permission_a_reason_and_another_persons_account(client, customer, operator):
    outsider = UserFactory(username="ivan", is_staff=True)
    outsider.groups.add(Group.objects.get(name="approvers"))  # approvers alone may not restrict accounts
    login_with_second_factor(client, outsider)
    assert restrict(client, customer, "trading", "on").status_code == 403
    with pytest.raises(PermissionDenied):
        account_trading_freeze(user_id=customer.id, operator_id=outsider.id, frozen=True, reason="x")
    with pytest.raises(DomainError):
        account_withdrawals_block(user_id=customer.id, operator_id=operator.id, blocked=True, reason="  ")
    with pytest.raises(PermissionDenied):
        account_withdrawals_block(user_id=operator.id, operator_id=operator.id, blocked=True, reason="x")
    assert audit(customer) == []


@pytest.mark.parametrize(
    ("restriction", "message"),
    [
        ("withdrawals", "Withdrawals are not restricted for this account: nothing to lift."),
        ("trading", "Trading is not frozen for this account: nothing to lift."),
    ],
)
def test_lifting_a_restriction_never_set_says_so_and_writes_nothing(client, operator, customer, restriction, message):
    client.force_login(operator)

    response = restrict(client, customer, restriction, "off", reason="all clear")

    shown = [str(shown) for shown in response.context["messages"]]
    assert shown == [message]
    assert audit(customer) == []
    assert not AccountRestriction.objects.filter(user=customer).exists()


@pytest.mark.parametrize("fields", [{"restriction": "bogus", "switch": "on"}, {"restriction": "trading", "switch": ""}])
def test_an_unknown_restriction_changes_nothing(client, operator, customer, fields):
    client.force_login(operator)
    response = client.post(f"/admin/backoffice/customer/{customer.id}/restrict/", {**fields, "reason": "x"})
    assert response.status_code == 302
    assert audit(customer) == []


def test_a_restriction_field_sent_twice_changes_nothing(client, operator, customer):
    """Break-it review: ``restriction=withdrawals&restriction=trading&switch=off&switch=on`` froze trading (the last
    of each was taken)."""
    client.force_login(operator)
    fields = {"restriction": ["withdrawals", "trading"], "switch": ["off", "on"], "reason": "x"}

    response = client.post(f"/admin/backoffice/customer/{customer.id}/restrict/", fields, follow=True)

    assert [str(shown) for shown in response.context["messages"]] == [
        "This field was sent more than once: send it once."
    ]
    assert audit(customer) == []
    assert not AccountRestriction.objects.filter(user=customer).exists()


def test_a_second_factor_reset_needs_another_operators_approval(client, operator, approver, customer):
    client.force_login(operator)
    client.post(f"/admin/backoffice/customer/{customer.id}/second-factor-reset/", {"reason": "lost phone, ID checked"})
    reset = SecondFactorReset.objects.get()
    assert "Approve the reset" not in page(client, customer)  # the requester cannot decide
    assert client.post(f"/admin/backoffice/customer/second-factor-reset/{reset.id}/decide/", {"decision": "approve"})
    assert TOTPDevice.objects.filter(user=customer).exists()

    approver_client = login_with_second_factor(Client(), approver)
    assert "Approve the reset" in page(approver_client, customer)
    approver_client.post(f"/admin/backoffice/customer/second-factor-reset/{reset.id}/decide/", {"decision": "approve"})

    assert not TOTPDevice.objects.filter(user=customer).exists()
    reset.refresh_from_db()
    assert (reset.status, reset.decided_by) == (ChangeStatus.APPROVED, approver)
    assert audit(customer) == [
        ("second_factor_reset.request", "olga"),
        ("withdrawals.paused", "arno"),  # the approval pauses the customer's withdrawals (apps.accounts.holds)
        ("second_factor_reset.approve", "arno"),
    ]
    approval = AuditLogEntry.objects.get(action="second_factor_reset.approve")
    assert len(approval.after["removed_devices"]) == 1
    assert "No second factor." in page(approver_client, customer)


def test_a_reset_is_refused_to_its_requester_and_decided_once(operator, approver, customer):
    reset = second_factor_reset_request(user_id=customer.id, operator_id=approver.id, reason="lost phone")
    with pytest.raises(InvalidState):  # one request at a time
        second_factor_reset_request(user_id=customer.id, operator_id=operator.id, reason="again")
    with pytest.raises(PermissionDenied):  # not a way around an approver's own second factor
        second_factor_reset_request(user_id=approver.id, operator_id=operator.id, reason="lost phone")
    with pytest.raises(PermissionDenied):
        second_factor_reset_approve(reset_id=reset.id, approver_id=approver.id)
    with pytest.raises(PermissionDenied):  # the operators group may request, not approve
        second_factor_reset_approve(reset_id=reset.id, approver_id=operator.id)
    other = UserFactory(username="otto", is_staff=True)
    other.groups.add(Group.objects.get(name="operators"), Group.objects.get(name="approvers"))
    second_factor_reset_approve(reset_id=reset.id, approver_id=other.id)
    with pytest.raises(InvalidState):
        second_factor_reset_approve(reset_id=reset.id, approver_id=other.id)
    assert not TOTPDevice.objects.filter(user=customer).exists()


def test_a_rejected_reset_is_told_in_words(operator, approver, customer):
    """A break-it review: the message read "Second-factor reset #1 rejectd.", and the errors "Second factor reset"."""
    reset = second_factor_reset_request(user_id=customer.id, operator_id=operator.id, reason="lost phone")
    approver_client = login_with_second_factor(Client(), approver)
    url = f"/admin/backoffice/customer/second-factor-reset/{reset.id}/decide/"

    response = approver_client.post(url, {"decision": "reject", "note": "ID not checked"}, follow=True)
    assert [str(m) for m in response.context["messages"]] == [f"Second-factor reset #{reset.id} rejected."]
    again = approver_client.post(url, {"decision": "approve"}, follow=True)
    assert [str(m) for m in again.context["messages"]] == [f"Second-factor reset #{reset.id} is already rejected."]
    assert TOTPDevice.objects.filter(user=customer).exists()


def test_a_reset_decision_without_the_second_factor_this_session_is_refused(client, operator, approver, customer):
    reset = second_factor_reset_request(user_id=customer.id, operator_id=operator.id, reason="lost phone")
    client.force_login(approver)  # no one-time password confirmed
    response = client.post(
        f"/admin/backoffice/customer/second-factor-reset/{reset.id}/decide/", {"decision": "approve"}
    )
    assert response.status_code == 302 and response.url.startswith("/admin/second-factor/")
    assert TOTPDevice.objects.filter(user=customer).exists()


def test_the_customer_list_shows_who_is_restricted(client, operator, customer):
    UserFactory(username="fred")
    account_trading_freeze(user_id=customer.id, operator_id=operator.id, frozen=True, reason="chargeback")
    client.force_login(operator)

    frozen = client.get("/admin/backoffice/customer/?restriction__trading_frozen__exact=1").content.decode()

    assert "carla" in frozen and "fred" not in frozen
    assert "fred" in client.get("/admin/backoffice/customer/").content.decode()
