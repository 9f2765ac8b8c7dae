from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction

from apps.audit.models import AuditLogEntry
from apps.backoffice.models import Adjustment, AdjustmentStatus
from apps.backoffice.services import (
    adjustment_approve,
    adjustment_draft,
    adjustment_reject,
    adjustment_withdraw,
)
from apps.core.errors import DomainError, InvalidState, PermissionDenied
from apps.ledger.errors import UnbalancedEntry
from apps.ledger.models import AccountKind, JournalEntry
from apps.ledger.selectors import balances_for_user
from apps.ledger.services import Leg, system_account, user_account
from apps.ledger.tests.factories import UserFactory, fund


@pytest.fixture
def goodwill_legs(usdt, user):
    """Credit the user 25 USDT against equity."""
    equity = system_account(AccountKind.EQUITY, usdt)
    return [Leg(equity.id, Decimal("25")), Leg(user_account(user.id, usdt).id, Decimal("-25"))]


def usdt_available(user):
    return next(b.available for b in balances_for_user(user.id) if b.asset == "USDT")


def test_a_draft_moves_nothing_until_another_operator_approves(operator, approver, user, goodwill_legs):
    adjustment = adjustment_draft(author_id=operator.id, memo="goodwill, ticket 7", legs=goodwill_legs)
    assert usdt_available(user) == Decimal("0")

    adjustment_approve(adjustment_id=adjustment.id, approver_id=approver.id)

    adjustment.refresh_from_db()
    assert adjustment.status == AdjustmentStatus.APPROVED
    assert usdt_available(user) == Decimal("25")
    entry = JournalEntry.objects.get(id=adjustment.entry_id)
    assert (entry.idempotency_key, entry.created_by_id) == (f"adjustment:{adjustment.id}", approver.id)
    assert list(AuditLogEntry.objects.filter(object_id=str(adjustment.id)).values_list("action", "actor")) == [
        ("adjustment.approve", approver.id),
        ("adjustment.draft", operator.id),
    ]


def test_the_author_cannot_approve_their_own_adjustment(operator, approver, user, goodwill_legs):
    adjustment = adjustment_draft(author_id=approver.id, memo="goodwill", legs=goodwill_legs)

    with pytest.raises(PermissionDenied):
        adjustment_approve(adjustment_id=adjustment.id, approver_id=approver.id)

    assert Adjustment.objects.get(id=adjustment.id).status == AdjustmentStatus.DRAFT
    assert usdt_available(user) == Decimal("0")


def test_the_database_refuses_a_checker_who_is_the_maker(operator, goodwill_legs):
    adjustment = adjustment_draft(author_id=operator.id, memo="goodwill", legs=goodwill_legs)
    with pytest.raises(IntegrityError, match="adjustment_checker_is_not_maker"), transaction.atomic():
        Adjustment.objects.filter(id=adjustment.id).update(decided_by=operator, status=AdjustmentStatus.REJECTED)


def test_a_draft_naming_an_account_twice_is_refused(operator, usdt):
    """Break-it review: equity debited and credited 1 each was drafted, approved and posted: an entry that moved
    nothing."""
    equity = system_account(AccountKind.EQUITY, usdt)
    with pytest.raises(DomainError) as raised:
        adjustment_draft(
            author_id=operator.id, memo="no-op", legs=[Leg(equity.id, Decimal("1")), Leg(equity.id, Decimal("-1"))]
        )
    assert raised.value.fields == {"legs": "Each account takes one leg: combine the legs on the same account."}
    assert not Adjustment.objects.exists()


def test_an_unbalanced_draft_is_refused(operator, usdt, user):
    equity = system_account(AccountKind.EQUITY, usdt)
    legs = [Leg(equity.id, Decimal("25")), Leg(user_account(user.id, usdt).id, Decimal("-24"))]
    with pytest.raises(UnbalancedEntry) as raised:
        adjustment_draft(author_id=operator.id, memo="oops", legs=legs)
    assert (
        raised.value.message == "Journal entry legs must sum to zero per asset: USDT debits exceed credits by 1.000000."
    )
    assert not Adjustment.objects.exists()


def test_an_unbalanced_draft_in_the_admin_says_by_how_much_and_in_which_asset(client, operator, user, usdt):
    client.force_login(operator)
    form = {
        "memo": "goodwill",
        "legs-TOTAL_FORMS": "2",
        "legs-INITIAL_FORMS": "0",
        "legs-MIN_NUM_FORMS": "2",
        "legs-MAX_NUM_FORMS": "1000",
        **{f"legs-0-{k}": v for k, v in {"kind": "equity", "asset": usdt.id, "side": "debit", "amount": "10"}.items()},
        **{
            f"legs-1-{k}": v
            for k, v in {
                "kind": "user_available",
                "asset": usdt.id,
                "username": user.username,
                "side": "credit",
            }.items()
        },
        "legs-1-amount": "12.5",
    }
    page = client.post("/admin/backoffice/adjustment/add/", form).content.decode()
    assert "USDT credits exceed debits by 2.500000." in page
    assert not Adjustment.objects.exists()


def _four_legs(user, usdt, total) -> dict:
    """The draft form with four balanced legs filled and ``legs-TOTAL_FORMS`` ``total`` (a list: sent repeatedly)."""
    legs = [("equity", "", "debit", "10"), ("user_available", user.username, "credit", "10")] * 2
    return {
        "memo": "goodwill",
        "legs-TOTAL_FORMS": total,
        "legs-INITIAL_FORMS": "0",
        "legs-MIN_NUM_FORMS": "2",
        "legs-MAX_NUM_FORMS": "1000",
        **{
            f"legs-{n}-{name}": value
            for n, (kind, username, side, amount) in enumerate(legs)
            for name, value in {
                "kind": kind,
                "asset": usdt.id,
                "username": username,
                "side": side,
                "amount": amount,
            }.items()
        },
    }


@pytest.mark.parametrize(
    ("total", "message"),
    [
        # Django reads the last legs-TOTAL_FORMS: 4 then 2 drafted the first two legs and dropped the others.
        (["4", "2"], "legs-TOTAL_FORMS: This field was sent more than once: send it once."),
        # ... and ignores legs numbered past it alike.
        ("2", "Forms past legs-TOTAL_FORMS (2) were sent: numbers 2, 3."),
    ],
)
def test_legs_the_leg_count_would_drop_are_refused(client, operator, user, usdt, total, message):
    """Break-it reviews: legs left out of the draft without a word; now nothing is drafted and the page says why."""
    client.force_login(operator)

    response = client.post("/admin/backoffice/adjustment/add/", _four_legs(user, usdt, total))

    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Adjustment.objects.exists()


def test_the_author_can_withdraw_their_own_draft_and_no_one_else_can(operator, approver, user, goodwill_legs):
    adjustment = adjustment_draft(author_id=operator.id, memo="duplicate of #3", legs=goodwill_legs)

    with pytest.raises(PermissionDenied):
        adjustment_withdraw(adjustment_id=adjustment.id, author_id=approver.id)
    withdrawn = adjustment_withdraw(adjustment_id=adjustment.id, author_id=operator.id)

    assert withdrawn.status == AdjustmentStatus.WITHDRAWN and withdrawn.decided_by_id is None
    with pytest.raises(InvalidState):
        adjustment_approve(adjustment_id=adjustment.id, approver_id=approver.id)
    with pytest.raises(InvalidState):
        adjustment_withdraw(adjustment_id=adjustment.id, author_id=operator.id)
    assert usdt_available(user) == Decimal("0") and not JournalEntry.objects.filter(reason="adjustment").exists()
    assert AuditLogEntry.objects.filter(action="adjustment.withdraw", actor=operator).count() == 1


def test_the_author_withdraws_a_draft_from_the_admin(client, operator, approver, goodwill_legs, admin_login):
    adjustment = adjustment_draft(author_id=operator.id, memo="typo", legs=goodwill_legs)
    page = f"/admin/backoffice/adjustment/{adjustment.id}/change/"
    admin_login(approver)
    seen_by_approver = client.get(page)
    assert seen_by_approver.status_code == 200 and "Approve and post" in seen_by_approver.content.decode()
    assert 'id="withdraw-draft"' not in seen_by_approver.content.decode()
    client.force_login(operator)
    assert 'id="withdraw-draft"' in client.get(page).content.decode()

    done = client.post(f"/admin/backoffice/adjustment/{adjustment.id}/withdraw/", follow=True).content.decode()

    assert f"Adjustment #{adjustment.id} withdrawn; nothing was posted." in done
    assert Adjustment.objects.get(id=adjustment.id).status == AdjustmentStatus.WITHDRAWN


def test_a_draft_without_an_equity_leg_is_refused(operator, usdt, user):
    custody = system_account(AccountKind.CUSTODY, usdt)
    legs = [Leg(custody.id, Decimal("1")), Leg(user_account(user.id, usdt).id, Decimal("-1"))]
    with pytest.raises(UnbalancedEntry, match="equity"):
        adjustment_draft(author_id=operator.id, memo="x", legs=legs)


def test_a_draft_needs_a_reason(operator, goodwill_legs):
    with pytest.raises(DomainError) as error:
        adjustment_draft(author_id=operator.id, memo="  ", legs=goodwill_legs)
    assert "memo" in error.value.fields


def test_approving_twice_posts_once(operator, approver, user, goodwill_legs):
    adjustment = adjustment_draft(author_id=operator.id, memo="goodwill", legs=goodwill_legs)
    adjustment_approve(adjustment_id=adjustment.id, approver_id=approver.id)
    with pytest.raises(InvalidState):
        adjustment_approve(adjustment_id=adjustment.id, approver_id=approver.id)
    assert usdt_available(user) == Decimal("25")


def test_a_rejected_adjustment_needs_a_note_and_cannot_be_approved(operator, approver, user, goodwill_legs):
    adjustment = adjustment_draft(author_id=operator.id, memo="goodwill", legs=goodwill_legs)
    with pytest.raises(DomainError):
        adjustment_reject(adjustment_id=adjustment.id, approver_id=approver.id, note="")
    adjustment_reject(adjustment_id=adjustment.id, approver_id=approver.id, note="no ticket")
    with pytest.raises(InvalidState):
        adjustment_approve(adjustment_id=adjustment.id, approver_id=approver.id)
    assert usdt_available(user) == Decimal("0")


def test_audit_log_is_append_only(operator, goodwill_legs):
    adjustment_draft(author_id=operator.id, memo="goodwill", legs=goodwill_legs)
    with pytest.raises(Exception, match="Cannot update or delete"), transaction.atomic():
        AuditLogEntry.objects.all().delete()


def test_a_session_cannot_switch_the_audit_logs_trigger_off_with_pgtrigger_ignore(operator, goodwill_legs):
    adjustment_draft(author_id=operator.id, memo="goodwill", legs=goodwill_legs)
    with pytest.raises(Exception, match="Cannot update or delete"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT tgname FROM pg_trigger WHERE tgname LIKE 'pgtrigger_append_only_%'")
            names = [name for (name,) in cursor.fetchall()]
            cursor.execute("SELECT set_config('pgtrigger.ignore', %s, true)", ["{" + ",".join(names) + "}"])
        AuditLogEntry.objects.all().delete()
    assert AuditLogEntry.objects.exists()


def test_maker_checker_through_the_admin(client, operator, approver, user, usdt, admin_login):
    client.force_login(operator)
    form = {
        "memo": "goodwill, ticket 9",
        "legs-TOTAL_FORMS": "6",
        "legs-INITIAL_FORMS": "0",
        "legs-MIN_NUM_FORMS": "2",
        "legs-MAX_NUM_FORMS": "1000",
        "legs-0-kind": "equity",
        "legs-0-asset": usdt.id,
        "legs-0-side": "debit",
        "legs-0-amount": "10",
        "legs-1-kind": "user_available",
        "legs-1-asset": usdt.id,
        "legs-1-username": user.username,
        "legs-1-side": "credit",
        "legs-1-amount": "10",
        # four untouched rows, as a browser sends them
        **{f"legs-{n}-{field}": "" for n in range(2, 6) for field in ("kind", "asset", "username", "side", "amount")},
    }
    response = client.post("/admin/backoffice/adjustment/add/", form)
    adjustment = Adjustment.objects.get()
    assert response.status_code == 302

    # The operator (not an approver, and the author) sees no approve button and cannot approve.
    assert (
        "Approve and post" not in client.get(f"/admin/backoffice/adjustment/{adjustment.id}/change/").content.decode()
    )
    assert client.post(f"/admin/backoffice/adjustment/{adjustment.id}/approve/").status_code == 403

    admin_login(approver)
    assert "Approve and post" in client.get(f"/admin/backoffice/adjustment/{adjustment.id}/change/").content.decode()
    client.post(f"/admin/backoffice/adjustment/{adjustment.id}/approve/")
    assert usdt_available(user) == Decimal("10")


def credit_form(asset, username: str, amount: str, memo: str = "x") -> dict:
    """The admin's draft form: debit equity, credit ``username``'s available ``asset``, ``amount`` each."""
    return {
        "memo": memo,
        "legs-TOTAL_FORMS": "2",
        "legs-INITIAL_FORMS": "0",
        "legs-MIN_NUM_FORMS": "2",
        "legs-MAX_NUM_FORMS": "1000",
        "legs-0-kind": "equity",
        "legs-0-asset": asset.id,
        "legs-0-side": "debit",
        "legs-0-amount": amount,
        "legs-1-kind": "user_available",
        "legs-1-asset": asset.id,
        "legs-1-username": username,
        "legs-1-side": "credit",
        "legs-1-amount": amount,
    }


def test_an_over_precise_leg_is_shown_next_to_the_field(client, operator, user, usdt):
    client.force_login(operator)
    response = client.post("/admin/backoffice/adjustment/add/", credit_form(usdt, user.username, "0.0000001"))
    assert response.status_code == 200
    assert "At most 6 decimal places" in response.content.decode()
    assert not Adjustment.objects.exists()


def test_a_fresh_exchange_can_draft_against_equity_without_any_equity_account_yet(client, operator, user, usdt):
    from apps.ledger.models import Account

    assert not Account.objects.filter(kind=AccountKind.EQUITY).exists()
    client.force_login(operator)
    client.post(
        "/admin/backoffice/adjustment/add/",
        {
            "memo": "opening capital",
            "legs-TOTAL_FORMS": "2",
            "legs-INITIAL_FORMS": "0",
            "legs-MIN_NUM_FORMS": "2",
            "legs-MAX_NUM_FORMS": "1000",
            "legs-0-kind": "equity",
            "legs-0-asset": usdt.id,
            "legs-0-side": "debit",
            "legs-0-amount": "5",
            "legs-1-kind": "user_available",
            "legs-1-asset": usdt.id,
            "legs-1-username": user.username,
            "legs-1-side": "credit",
            "legs-1-amount": "5",
        },
    )
    assert Adjustment.objects.get().legs[0]["amount"] == "5.000000"


@pytest.mark.parametrize(
    "row, field",
    [
        ({"kind": "user_available", "username": "nobody"}, "username"),
        ({"kind": "user_available", "username": ""}, "username"),
        ({"kind": "equity", "username": "someone"}, "username"),
        ({"side": "sideways"}, "side"),
        ({"kind": "user_held"}, "kind"),
        ({"amount": "-5"}, "amount"),
    ],
)
def test_bad_legs_are_named_next_to_the_field_not_a_500(client, operator, user, usdt, row, field):
    client.force_login(operator)
    leg = {"kind": "equity", "asset": usdt.id, "username": "", "side": "debit", "amount": "5", **row}
    response = client.post(
        "/admin/backoffice/adjustment/add/",
        {
            "memo": "x",
            "legs-TOTAL_FORMS": "2",
            "legs-INITIAL_FORMS": "0",
            "legs-MIN_NUM_FORMS": "2",
            "legs-MAX_NUM_FORMS": "1000",
            **{f"legs-0-{name}": value for name, value in leg.items()},
            "legs-1-kind": "user_available",
            "legs-1-asset": usdt.id,
            "legs-1-username": user.username,
            "legs-1-side": "credit",
            "legs-1-amount": "5",
        },
    )
    assert response.status_code == 200
    assert field in response.context["legs"].forms[0].errors
    assert not Adjustment.objects.exists()


def test_held_funds_cannot_be_adjusted(operator, usdt, user):
    held = user_account(user.id, usdt, AccountKind.USER_HELD)
    equity = system_account(AccountKind.EQUITY, usdt)
    with pytest.raises(DomainError, match="Held funds"):
        adjustment_draft(
            author_id=operator.id, memo="x", legs=[Leg(held.id, Decimal("1")), Leg(equity.id, Decimal("-1"))]
        )


@pytest.mark.parametrize(
    "path", ["/admin/backoffice/adjustment/abc/change/", "/admin/backoffice/adjustment/9999999999999999999999/change/"]
)
def test_a_malformed_id_in_the_admin_is_a_404(client, operator, path):
    client.force_login(operator)
    assert client.get(path).status_code == 404


def _credit_legs(usdt, owner, amount="1"):
    """Credit ``owner``'s available USDT against equity."""
    equity = system_account(AccountKind.EQUITY, usdt)
    return [Leg(equity.id, Decimal(amount)), Leg(user_account(owner.id, usdt).id, -Decimal(amount))]


@pytest.mark.parametrize("beneficiary", ["author", "approver"])
def test_an_adjustment_cannot_credit_an_operators_own_funds(operator, approver, usdt, beneficiary):
    owner = operator if beneficiary == "author" else approver
    with pytest.raises(DomainError, match=f"customers' funds only; staff: {owner.username}") as refused:
        adjustment_draft(author_id=operator.id, memo="bonus", legs=_credit_legs(usdt, owner))
    assert refused.value.fields == {"legs": refused.value.message}
    assert not Adjustment.objects.exists()


def test_a_superusers_funds_cannot_be_adjusted_either(operator, usdt):
    root = UserFactory(username="root", is_superuser=True)
    with pytest.raises(DomainError, match="staff: root"):
        adjustment_draft(author_id=operator.id, memo="bonus", legs=_credit_legs(usdt, root))


def test_a_draft_whose_customer_became_staff_is_not_posted(operator, approver, user, usdt):
    adjustment = adjustment_draft(author_id=operator.id, memo="goodwill", legs=_credit_legs(usdt, user, "25"))
    user.is_staff = True
    user.save(update_fields=["is_staff"])

    with pytest.raises(DomainError, match=f"staff: {user.username}"):
        adjustment_approve(adjustment_id=adjustment.id, approver_id=approver.id)

    adjustment.refresh_from_db()
    assert (adjustment.status, adjustment.entry_id) == (AdjustmentStatus.DRAFT, None)
    assert usdt_available(user) == Decimal("0")


def test_the_admin_says_why_an_operators_own_funds_cannot_be_adjusted(client, operator, usdt):
    client.force_login(operator)
    response = client.post("/admin/backoffice/adjustment/add/", credit_form(usdt, operator.username, "1", "bonus"))
    assert response.status_code == 200
    assert f"customers&#x27; funds only; staff: {operator.username}" in response.content.decode()
    assert not Adjustment.objects.exists()


def test_a_draft_that_would_overdraw_a_customer_is_refused_at_once(operator, user, usdt):
    """Not only at approval (from a break-it review: a draft debiting 5 BTC from a user holding none was drafted)."""
    fund(user, usdt, "3")
    equity = system_account(AccountKind.EQUITY, usdt)
    debit_user = [Leg(user_account(user.id, usdt).id, Decimal("5")), Leg(equity.id, Decimal("-5"))]

    with pytest.raises(DomainError, match=f"overdraw a customer: {user.username} has 3.000000 USDT available"):
        adjustment_draft(author_id=operator.id, memo="chargeback", legs=debit_user)

    assert not Adjustment.objects.filter(memo="chargeback").exists()  # only the funding's
    within = [Leg(user_account(user.id, usdt).id, Decimal("3")), Leg(equity.id, Decimal("-3"))]
    assert adjustment_draft(author_id=operator.id, memo="chargeback", legs=within).status == AdjustmentStatus.DRAFT
