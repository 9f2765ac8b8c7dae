"""Hole 5: fee schedule changes follow maker-checker, need the approver's second factor and are capped."""

import threading
from decimal import Decimal

import pytest
from django.test import Client

from apps.audit.models import AuditLogEntry
from apps.backoffice.models import ChangeStatus, FeeChange
from apps.backoffice.services import fee_change_approve, fee_change_draft, fee_change_reject
from apps.backoffice.tests.logins import login_with_second_factor
from apps.core.errors import DomainError, InvalidState, PermissionDenied
from apps.orders.errors import InvalidFeeRate
from apps.orders.models import FeeSchedule, UserFeeTier
from apps.orders.selectors import fee_rates_for_user

D = Decimal
ADD = "/admin/backoffice/feechange/add/"
OWN = (
    "Operators cannot draft or decide on a change of what they pay: their own fee tier, or the rates of their schedule."
)


@pytest.fixture
def default_schedule(db) -> FeeSchedule:
    return FeeSchedule.objects.get(is_default=True)


def draft_form(**fields) -> dict:
    return {
        "kind": "create",
        "name": "",
        "maker_rate": "",
        "taker_rate": "",
        "username": "",
        "memo": "ticket 12",
        **fields,
    }


def decide(client, change_id, decision, note=""):
    return client.post(f"/admin/backoffice/feechange/{change_id}/decide/", {"decision": decision, "note": note})


def test_an_operator_alone_can_neither_create_a_99_percent_schedule_nor_make_it_the_default(
    client, operator, default_schedule
):
    """The regression: an operator without approver rights created a 99.999999 % taker fee and made it the default."""
    client.force_login(operator)

    direct = client.post(
        "/admin/orders/feeschedule/add/",
        {"name": "greedy", "maker_rate": "0", "taker_rate": "0.99999999", "tiers-TOTAL_FORMS": "0"},
    )
    assert direct.status_code == 403
    page = client.post(ADD, draft_form(name="greedy", maker_rate="0", taker_rate="0.99999999")).content.decode()
    assert "At most 0.01 (1 %), the limit set by FEE_RATE_MAX." in page
    assert not FeeChange.objects.exists()

    drafted = client.post(ADD, draft_form(name="greedy", maker_rate="0", taker_rate="0.01"))
    change = FeeChange.objects.get()
    assert drafted.url == f"/admin/backoffice/feechange/{change.id}/change/"
    assert decide(client, change.id, "approve").status_code == 403

    assert list(FeeSchedule.objects.values_list("name", "taker_rate", "is_default")) == [("default", D("0.001"), True)]
    assert FeeChange.objects.get().status == ChangeStatus.DRAFT


def test_another_approver_with_the_second_factor_applies_the_change(client, operator, approver, default_schedule):
    change = fee_change_draft(
        author_id=operator.id, kind="create", memo="market maker deal", name="VIP", maker_rate="0", taker_rate="0.0005"
    )
    unverified = Client()
    unverified.force_login(approver)
    refused = decide(unverified, change.id, "approve")
    assert refused.status_code == 302 and refused.url.startswith("/admin/second-factor/")
    assert not FeeSchedule.objects.filter(name="VIP").exists()

    login_with_second_factor(client, approver)
    page = client.get(f"/admin/backoffice/feechange/{change.id}/change/").content.decode()
    assert "Approve and apply" in page and "0.00050000" in page
    decide(client, change.id, "approve")

    vip = FeeSchedule.objects.get(name="VIP")
    assert (vip.maker_rate, vip.taker_rate, vip.is_default) == (D("0"), D("0.0005"), False)
    change.refresh_from_db()
    assert (change.status, change.decided_by, change.schedule) == (ChangeStatus.APPROVED, approver, vip)
    log = AuditLogEntry.objects.exclude(action__in=("login", "second_factor.enrol")).order_by("id")
    assert [(row.action, row.actor_id, row.object_type) for row in log] == [
        ("fee_change.draft", operator.id, "backoffice.feechange"),
        ("fee_change.approve", approver.id, "backoffice.feechange"),
        ("fee_schedule.create", approver.id, "orders.feeschedule"),
    ]
    assert log.last().after == {
        "name": "VIP",
        "maker_rate": "0",
        "taker_rate": "0.0005",
        "is_default": False,
        "fee_change": change.id,
    }


def test_rates_default_and_tiers_each_wait_for_approval(operator, approver, user, default_schedule):
    vip = FeeSchedule.objects.create(name="VIP", maker_rate=D("0"), taker_rate=D("0.0005"))
    rates = fee_change_draft(
        author_id=operator.id, kind="rates", memo="t1", schedule_id=vip.id, maker_rate="0.0001", taker_rate="0.0004"
    )
    default = fee_change_draft(author_id=operator.id, kind="make_default", memo="t2", schedule_id=vip.id)
    tier = fee_change_draft(author_id=operator.id, kind="assign_tier", memo="t3", user_id=user.id, schedule_id=vip.id)
    assert fee_rates_for_user(user_id=user.id) == (D("0.001"), D("0.001"))  # nothing applied yet

    fee_change_approve(change_id=tier.id, approver_id=approver.id)
    assert fee_rates_for_user(user_id=user.id) == (D("0"), D("0.0005"))
    fee_change_approve(change_id=rates.id, approver_id=approver.id)
    assert fee_rates_for_user(user_id=user.id) == (D("0.0001"), D("0.0004"))
    fee_change_approve(change_id=default.id, approver_id=approver.id)
    assert list(FeeSchedule.objects.filter(is_default=True).values_list("name", flat=True)) == ["VIP"]

    back = fee_change_draft(author_id=operator.id, kind="assign_tier", memo="t4", user_id=user.id)
    fee_change_approve(change_id=back.id, approver_id=approver.id)
    assert not UserFeeTier.objects.filter(user=user).exists()
    actions = AuditLogEntry.objects.filter(action__startswith="fee_").exclude(action__startswith="fee_change")
    assert list(actions.order_by("id").values_list("action", "before", "after")) == [
        (
            "fee_tier.assign",
            {"user": user.id, "schedule": None, "fee_change": tier.id},
            {"user": user.id, "schedule": "VIP", "fee_change": tier.id},
        ),
        (
            "fee_schedule.update",
            {"name": "VIP", "maker_rate": "0", "taker_rate": "0.0005", "is_default": False, "fee_change": rates.id},
            {
                "name": "VIP",
                "maker_rate": "0.0001",
                "taker_rate": "0.0004",
                "is_default": False,
                "fee_change": rates.id,
            },
        ),
        (
            "fee_schedule.make_default",
            {"default": "default", "fee_change": default.id},
            {"default": "VIP", "fee_change": default.id},
        ),
        (
            "fee_tier.assign",
            {"user": user.id, "schedule": "VIP", "fee_change": back.id},
            {"user": user.id, "schedule": None, "fee_change": back.id},
        ),
    ]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("0.0100001", "At most 0.01"),
        ("-0.001", "Must be positive"),
        ("0.000000001", "decimal"),
        ("1e-3", "plain decimal"),
        ("NaN", "plain decimal"),
    ],
)
def test_a_rate_outside_zero_to_the_cap_or_finer_than_8_places_is_refused(operator, raw, message):
    with pytest.raises(InvalidFeeRate) as raised:
        fee_change_draft(author_id=operator.id, kind="create", memo="t", name="x", maker_rate="0", taker_rate=raw)
    assert raised.value.code == "invalid_fee_rate"
    assert message in raised.value.fields["taker_rate"]
    assert not FeeChange.objects.exists()


@pytest.mark.parametrize("name", ["\u202evip", "v\u200bip", "vip\x07"])
def test_a_schedule_name_with_a_control_or_invisible_character_is_refused(operator, name):
    """Break-it review: a right-to-left override in a new schedule's name was drafted, and could show the approving
    operator another name than the one approved (reasons already refused these characters)."""
    with pytest.raises(DomainError) as raised:
        fee_change_draft(
            author_id=operator.id, kind="create", memo="t", name=f"{name}x", maker_rate="0", taker_rate="0"
        )
    assert raised.value.fields == {"name": "Control and invisible formatting characters are not allowed."}
    assert not FeeChange.objects.exists()


def test_the_cap_is_checked_again_when_the_change_is_applied(operator, approver, settings, default_schedule):
    change = fee_change_draft(
        author_id=operator.id,
        kind="rates",
        memo="t",
        schedule_id=default_schedule.id,
        maker_rate="0.002",
        taker_rate="0.005",
    )
    settings.FEE_RATE_MAX = D("0.004")

    with pytest.raises(InvalidFeeRate):
        fee_change_approve(change_id=change.id, approver_id=approver.id)

    assert FeeChange.objects.get().status == ChangeStatus.DRAFT
    assert FeeSchedule.objects.get(id=default_schedule.id).taker_rate == D("0.001")


def test_a_schedule_above_the_cap_cannot_become_the_default_or_a_tier(operator, user, default_schedule):
    greedy = FeeSchedule.objects.create(name="greedy", maker_rate=D("0"), taker_rate=D("0.99999999"))  # from before
    with pytest.raises(InvalidFeeRate) as raised:
        fee_change_draft(author_id=operator.id, kind="make_default", memo="t", schedule_id=greedy.id)
    assert raised.value.fields == {
        "schedule": "greedy's taker rate: At most 0.01 (1 %), the limit set by FEE_RATE_MAX."
    }
    with pytest.raises(InvalidFeeRate):
        fee_change_draft(author_id=operator.id, kind="assign_tier", memo="t", schedule_id=greedy.id, user_id=user.id)
    assert not FeeChange.objects.exists()


def test_the_author_cannot_approve_and_a_change_is_decided_once(operator, approver, default_schedule):
    own = fee_change_draft(author_id=approver.id, kind="make_default", memo="t", schedule_id=default_schedule.id)
    with pytest.raises(PermissionDenied):
        fee_change_approve(change_id=own.id, approver_id=approver.id)

    change = fee_change_draft(author_id=operator.id, kind="create", memo="t", name="B", maker_rate="0", taker_rate="0")
    with pytest.raises(DomainError):
        fee_change_reject(change_id=change.id, approver_id=approver.id, note=" ")
    fee_change_reject(change_id=change.id, approver_id=approver.id, note="no ticket")
    with pytest.raises(InvalidState):
        fee_change_approve(change_id=change.id, approver_id=approver.id)
    assert not FeeSchedule.objects.filter(name="B").exists()
    assert FeeChange.objects.get(id=change.id).decision_note == "no ticket"


def test_nobody_drafts_or_decides_a_change_of_their_own_fee_tier(operator, approver, default_schedule):
    """A break-it review: an approver approved a zero-fee tier for their own account, which an operator drafted."""
    zero = FeeSchedule.objects.create(name="zero", maker_rate=D("0"), taker_rate=D("0"))
    with pytest.raises(PermissionDenied) as raised:
        fee_change_draft(author_id=operator.id, kind="assign_tier", memo="t", user_id=operator.id, schedule_id=zero.id)
    assert raised.value.fields == {"user": OWN}

    # Drafted before staff tiers were refused (fee_change_draft refuses it now): its approver still may not decide it.
    for_approver = FeeChange.objects.create(
        kind="assign_tier", memo="t", user=approver, schedule=zero, created_by=operator
    )
    with pytest.raises(PermissionDenied, match="their own fee tier"):
        fee_change_approve(change_id=for_approver.id, approver_id=approver.id)
    with pytest.raises(PermissionDenied, match="their own fee tier"):
        fee_change_reject(change_id=for_approver.id, approver_id=approver.id, note="mine")
    assert FeeChange.objects.get(id=for_approver.id).status == ChangeStatus.DRAFT
    assert not UserFeeTier.objects.filter(user=approver).exists()
    assert not AuditLogEntry.objects.filter(action__in=("fee_change.approve", "fee_change.reject")).exists()


def test_a_fee_tier_for_a_staff_user_is_refused(operator, approver, default_schedule):
    """Break-it review: a tier for an approver was drafted (another operator would approve it) while adjustments
    refuse staff funds."""
    zero = FeeSchedule.objects.create(name="zero", maker_rate=D("0"), taker_rate=D("0"))
    with pytest.raises(DomainError) as raised:
        fee_change_draft(author_id=operator.id, kind="assign_tier", memo="t", user_id=approver.id, schedule_id=zero.id)
    assert raised.value.fields == {"user": "Fee tiers are for customers only; arno is staff."}
    assert not FeeChange.objects.filter(kind="assign_tier").exists()


def test_a_fee_tier_for_a_customer_made_staff_after_the_draft_is_not_applied(
    operator, approver, user, default_schedule
):
    zero = FeeSchedule.objects.create(name="zero", maker_rate=D("0"), taker_rate=D("0"))
    change = fee_change_draft(author_id=operator.id, kind="assign_tier", memo="t", user_id=user.id, schedule_id=zero.id)
    type(user).objects.filter(id=user.id).update(is_staff=True)

    with pytest.raises(DomainError, match="Fee tiers are for customers only"):
        fee_change_approve(change_id=change.id, approver_id=approver.id)

    assert not UserFeeTier.objects.filter(user=user).exists()
    assert FeeChange.objects.get(id=change.id).status == ChangeStatus.DRAFT


def test_nobody_drafts_or_decides_the_rates_of_a_schedule_they_pay(operator, approver, default_schedule):
    """A break-it review: an approver on a schedule approved its rates at 0 %, drafted by another approver."""
    from apps.orders.services import fee_tier_assign

    staff = FeeSchedule.objects.create(name="staff", maker_rate=D("0.001"), taker_rate=D("0.001"))
    fee_tier_assign(user_id=approver.id, schedule_id=staff.id)
    with pytest.raises(PermissionDenied) as raised:
        fee_change_draft(
            author_id=approver.id, kind="rates", memo="t", schedule_id=staff.id, maker_rate="0", taker_rate="0"
        )
    assert raised.value.fields == {"schedule": OWN}

    cut = fee_change_draft(
        author_id=operator.id, kind="rates", memo="t", schedule_id=staff.id, maker_rate="0", taker_rate="0"
    )
    with pytest.raises(PermissionDenied, match="the rates of their schedule"):
        fee_change_approve(change_id=cut.id, approver_id=approver.id)
    assert FeeSchedule.objects.get(id=staff.id).taker_rate == D("0.001")
    other = fee_change_draft(
        author_id=operator.id,
        kind="rates",
        memo="t",
        schedule_id=default_schedule.id,
        maker_rate="0.0009",
        taker_rate="0.0009",
    )
    fee_change_approve(change_id=other.id, approver_id=approver.id)  # a schedule the approver does not pay
    assert FeeSchedule.objects.get(id=default_schedule.id).taker_rate == D("0.0009")


def test_the_database_refuses_a_fee_tier_change_drafted_or_decided_by_its_user(operator, approver, default_schedule):
    from django.db import IntegrityError, transaction
    from django.utils import timezone

    with pytest.raises(IntegrityError, match="fee_change_not_own_tier"), transaction.atomic():
        FeeChange.objects.create(kind="assign_tier", memo="t", user=operator, created_by=operator)
    change = FeeChange.objects.create(kind="assign_tier", memo="t", user=approver, created_by=operator)
    change.status, change.decided_by, change.decided_at = ChangeStatus.APPROVED, approver, timezone.now()
    with pytest.raises(IntegrityError, match="fee_change_not_own_tier"), transaction.atomic():
        change.save()


def test_an_operator_without_the_approve_permission_is_refused_by_the_service(operator, approver, default_schedule):
    change = fee_change_draft(author_id=approver.id, kind="create", memo="t", name="C", maker_rate="0", taker_rate="0")
    with pytest.raises(PermissionDenied):
        fee_change_approve(change_id=change.id, approver_id=operator.id)
    assert not FeeSchedule.objects.filter(name="C").exists()


def test_a_draft_missing_what_its_kind_needs_is_refused_on_the_form(client, operator, default_schedule):
    client.force_login(operator)
    for form, field_error in [
        (draft_form(kind="rates", maker_rate="0.001", taker_rate="0.001"), "Required."),
        (draft_form(kind="assign_tier", username="nobody"), "No such user."),
        (draft_form(kind="create", name="default", maker_rate="0", taker_rate="0"), "Taken or too long."),
        (draft_form(kind="bogus"), "Select a valid choice."),
    ]:
        response = client.post(ADD, form)
        assert response.status_code == 200 and field_error in response.content.decode(), form
    assert not FeeChange.objects.exists()


def draft_rates(author, schedule, rate: str, memo: str = "t") -> FeeChange:
    """A drafted change of ``schedule``'s maker and taker rates, both to ``rate``."""
    return fee_change_draft(
        author_id=author.id, kind="rates", memo=memo, schedule_id=schedule.id, maker_rate=rate, taker_rate=rate
    )


def test_one_change_of_a_schedules_rates_awaits_a_decision_at_a_time(client, operator, approver, default_schedule):
    """Break-it review: two rate changes of one schedule were both drafted and approved, the older last, which
    silently undid the newer; the page showed only the rates asked for."""
    first = draft_rates(operator, default_schedule, "0.002")
    with pytest.raises(InvalidState, match=f"Fee change #{first.id} of the same already awaits a decision"):
        draft_rates(operator, default_schedule, "0.003")
    login_with_second_factor(client, approver)
    page = client.get(f"/admin/backoffice/feechange/{first.id}/change/").content.decode()
    assert "0.00200000 (now 0.00100000)" in page

    fee_change_reject(change_id=first.id, approver_id=approver.id, note="not this quarter")
    second = draft_rates(operator, default_schedule, "0.003")
    assert FeeChange.objects.filter(status=ChangeStatus.DRAFT).get() == second


@pytest.mark.django_db(transaction=True)
def test_two_drafts_of_the_same_change_at_once_leave_one(default_fees):
    from django.db import connection

    from apps.ledger.tests.factories import UserFactory

    operator = UserFactory(is_staff=True)  # the groups are the migrations' rows, which transactional tests empty
    barrier, outcomes = threading.Barrier(2), []

    def draft(rate: str) -> None:
        try:
            barrier.wait(timeout=30)
            draft_rates(operator, default_fees, rate, memo="race")
            outcomes.append("drafted")
        except InvalidState:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=draft, args=(rate,)) for rate in ("0.002", "0.003")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(outcomes) == ["drafted", "refused"]
    assert FeeChange.objects.filter(status=ChangeStatus.DRAFT).count() == 1
