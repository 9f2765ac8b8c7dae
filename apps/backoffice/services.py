"""Operators' writes: reconciliation runs, maker-checker requests (adjustments, fee changes, market filter changes,
second-factor resets, lifting a withdrawals block). The audit log's writer is :func:`apps.backoffice.audit.audit_record`."""

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Generic, TypeVar

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from django_otp import devices_for_user

from apps.accounts.holds import withdrawals_hold
from apps.accounts.models import HoldReason
from apps.accounts.restrictions import account_withdrawals_unblock, restriction_operator_check
from apps.accounts.selectors import account_restriction
from apps.audit.services import audit_record
from apps.core.errors import DomainError, InvalidState, NotFound, PermissionDenied
from apps.core.reasons import hidden_characters_refuse, reason_checked
from apps.ledger.amounts import format_amount, format_exact
from apps.ledger.models import Account, AccountKind
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import Leg, adjustment_legs_validate, adjustment_post
from apps.ledger.transactions import retrying_atomic
from apps.orders.models import FeeSchedule, UserFeeTier
from apps.orders.services import (
    fee_rate_parse,
    fee_schedule_cap_check,
    fee_schedule_create,
    fee_schedule_make_default,
    fee_schedule_rates_update,
    fee_tier_assign,
    market_filters_check,
    market_filters_update,
    market_locked,
    market_state,
)
from apps.wallets.models import Withdrawal
from apps.wallets.services import withdrawal_approve, withdrawal_reject

from .models import (
    Adjustment,
    AdjustmentStatus,
    ChangeStatus,
    FeeChange,
    FeeChangeKind,
    MakerCheckerDraft,
    MarketChange,
    ReconciliationRun,
    SecondFactorReset,
    WithdrawalsUnblock,
)

Draft = TypeVar("Draft", bound=MakerCheckerDraft)  # the request kind a flow decides on


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


def _staff_funds_refuse(legs: Sequence[Leg]) -> None:
    """Refuse legs on the funds of a staff user (staff or superuser): adjustments correct customers' funds, and
    an operator could otherwise draft a credit to himself that another operator approves (maker-checker guards
    the decision, not who benefits). Raises :class:`DomainError` (field ``legs``) naming them."""
    owners = Account.objects.filter(id__in=[leg.account_id for leg in legs], owner__isnull=False).values("owner_id")
    staff = list(
        get_user_model()
        .objects.filter(Q(is_staff=True) | Q(is_superuser=True), id__in=owners)
        .order_by("username")
        .values_list("username", flat=True)
    )
    if staff:
        message = f"Adjustments move customers' funds only; staff: {', '.join(staff)}."
        raise DomainError(message, fields={"legs": message})


def _overdraft_refuse(legs: Sequence[Leg]) -> None:
    """Refuse legs that would take a user's available funds below zero as they stand now (approving checks again,
    against the balance then). Raises :class:`DomainError` (field ``legs``) naming whose and how much they have."""
    debits: dict[int, Decimal] = defaultdict(Decimal)
    for leg in legs:
        debits[leg.account_id] += leg.amount  # a debit (positive) takes from a user's available funds
    accounts = (
        Account.objects.filter(
            id__in=[account_id for account_id, amount in debits.items() if amount > 0], kind=AccountKind.USER_AVAILABLE
        )
        .order_by("id")
        .values_list("id", "balance", "owner__username", "asset__code", "asset__decimals")
    )
    short = [
        f"{username} has {format_amount(balance, decimals)} {code} available"
        for account_id, balance, username, code, decimals in accounts
        if debits[account_id] > balance
    ]
    if short:
        message = f"This would overdraw a customer: {'; '.join(short)}."
        raise DomainError(message, fields={"legs": message})


@transaction.atomic
def adjustment_draft(*, author_id: int, memo: str, legs: Sequence[Leg]) -> Adjustment:
    """Draft a manual adjustment: ``legs`` (signed amounts, debit positive, each in its account's asset).

    The legs must balance per asset, be exact at each asset's precision, include an
    ``equity`` account (DESIGN.md section 4), leave held funds alone, touch no staff user's funds and
    overdraw no customer as balances stand (approval checks again). Nothing moves until another operator approves.
    Raises :class:`DomainError` (memo, staff funds, an overdraft), :class:`UnbalancedEntry`, :class:`InvalidAmount`,
    :class:`NotFound`.
    """
    memo = reason_checked(memo, field="memo")
    adjustment_legs_validate(legs)
    _staff_funds_refuse(legs)
    _overdraft_refuse(legs)
    adjustment = Adjustment.objects.create(
        memo=memo,
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


def _lock_draft(model: type[Draft], draft_id: int, operator_id: int, *, permission: str | None = None) -> Draft:
    """Lock a maker-checker request (an adjustment, a fee change, a second-factor reset) still in draft.

    Refuses the author (:class:`PermissionDenied`), an operator without ``permission`` when one
    is named, a request already decided (:class:`InvalidState`) or unknown (:class:`NotFound`).
    """
    noun = str(model._meta.verbose_name)
    if permission is not None:
        operator = get_user_model().objects.filter(pk=operator_id, is_active=True, is_staff=True).first()
        if operator is None or not operator.has_perm(permission):
            raise PermissionDenied(f"Deciding on this {noun} needs the {permission} permission.")
    draft = model._default_manager.select_for_update(of=("self",), no_key=True).filter(pk=draft_id).first()
    if draft is None:
        raise NotFound(f"No such {noun}.")
    if draft.status != ChangeStatus.DRAFT:  # the same value as AdjustmentStatus.DRAFT
        raise InvalidState(f"{noun.capitalize()} #{draft.pk} is already {draft.get_status_display().lower()}.")
    if draft.created_by_id == operator_id:
        raise PermissionDenied(
            f"{noun.capitalize()} #{draft.pk} must be approved or rejected by another operator than its author."
        )
    return draft


@dataclass(frozen=True)
class _Applied:
    """What approving (or rejecting) a request did besides its own state: keys added to the ``after`` of its
    audit row, the fields of the request it changed, and further audit rows (:func:`audit_record`'s keyword
    arguments) written after the request's own."""

    after: dict = field(default_factory=dict)
    fields: tuple[str, ...] = ()
    audits: tuple[dict, ...] = ()


@dataclass(frozen=True)
class _Flow(Generic[Draft]):
    """One kind of maker-checker request: its model, the audit ``action`` prefix (``"fee_change"`` ->
    ``fee_change.approve``), the permission deciding needs (besides not being the author), the state its audit
    rows record, and the object they are about (the request itself unless ``subject`` says otherwise)."""

    model: type[Draft]
    action: str
    state: Callable[[Draft], dict]
    permission: str | None = None
    subject: Callable[[Draft], tuple[str, object]] | None = None

    def audited_object(self, draft: Draft) -> tuple[str, object]:
        if self.subject is not None:
            return self.subject(draft)
        return f"{draft._meta.app_label}.{draft._meta.model_name}", draft.pk


def _draft_decide(
    flow: _Flow[Draft],
    draft_id: int,
    operator_id: int,
    *,
    approve: bool,
    note: str = "",
    apply: Callable[[Draft], _Applied] | None = None,
) -> Draft:
    """Approve or reject (with a ``note`` saying why) a request of ``flow`` still in draft, in the caller's
    transaction: lock it (:func:`_lock_draft`), run ``apply`` (what approving does, or a check), record the
    decision (``decided_by``, ``decided_at``, ``decision_note``) and audit it as ``<action>.approve`` /
    ``<action>.reject`` with the state before and after, then the rows ``apply`` asked for.

    Raises :class:`DomainError` (a rejection without a note) and what :func:`_lock_draft` and ``apply`` raise.
    """
    if not approve:
        note = reason_checked(note, field="note")
    draft = _lock_draft(flow.model, draft_id, operator_id, permission=flow.permission)
    before = flow.state(draft)
    applied = apply(draft) if apply is not None else _Applied()
    draft.status = ChangeStatus.APPROVED if approve else ChangeStatus.REJECTED  # AdjustmentStatus has the same
    draft.decided_by_id = operator_id
    draft.decided_at = timezone.now()
    draft.decision_note = note.strip()
    draft.save(update_fields=["status", "decided_by", "decided_at", "decision_note", *applied.fields])
    object_type, object_id = flow.audited_object(draft)
    audit_record(
        actor_id=operator_id,
        action=f"{flow.action}.{'approve' if approve else 'reject'}",
        object_type=object_type,
        object_id=object_id,
        before=before,
        after={**flow.state(draft), **applied.after},
    )
    for row in applied.audits:
        audit_record(actor_id=operator_id, **row)
    return draft


_ADJUSTMENT = _Flow(Adjustment, "adjustment", _adjustment_state)


@retrying_atomic
def adjustment_approve(*, adjustment_id: int, approver_id: int) -> Adjustment:
    """Approve a draft and post it through the ledger (key ``adjustment:<id>``); the approver is recorded.

    State-guarded under a row lock: approving twice raises :class:`InvalidState`; the
    author approving raises :class:`PermissionDenied`; a draft whose legs touch a staff user's funds (made staff
    since it was drafted) raises :class:`DomainError` and stays a draft.
    """

    def post(adjustment: Adjustment) -> _Applied:
        legs = [Leg(leg["account"], Decimal(leg["amount"])) for leg in adjustment.legs]
        _staff_funds_refuse(legs)
        entry = adjustment_post(
            adjustment_id=str(adjustment.id),
            legs=legs,
            memo=adjustment.memo,
            operator_id=approver_id,
        )
        adjustment.entry_id = entry.id
        return _Applied(fields=("entry",))

    return _draft_decide(_ADJUSTMENT, adjustment_id, approver_id, approve=True, apply=post)


@retrying_atomic
def adjustment_reject(*, adjustment_id: int, approver_id: int, note: str) -> Adjustment:
    """Reject a draft with a ``note`` saying why; nothing is posted. Guards as :func:`adjustment_approve`."""
    return _draft_decide(_ADJUSTMENT, adjustment_id, approver_id, approve=False, note=note)


@retrying_atomic
def adjustment_withdraw(*, adjustment_id: int, author_id: int) -> Adjustment:
    """The author withdraws their own draft (a mistake, a duplicate); nothing is posted, the audit log records it.

    State-guarded under a row lock: raises :class:`InvalidState` once it is decided or withdrawn,
    :class:`PermissionDenied` for anyone but its author, :class:`NotFound`.
    """
    adjustment = Adjustment.objects.select_for_update(of=("self",), no_key=True).filter(id=adjustment_id).first()
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
    # A rejection reads the state it overturns under the row lock withdrawal_reject takes first anyway (break-it
    # review: racing an approval, it audited awaiting_approval for a withdrawal it found approved). An approval moves
    # only from awaiting_approval, so what it reads unlocked is what it changed, and its locks keep their order
    # (the withdrawals block, then the row).
    rows = Withdrawal.objects.filter(id=withdrawal_id)
    before = (rows if approve else rows.select_for_update(no_key=True)).first()
    if approve:
        withdrawal = withdrawal_approve(withdrawal_id=withdrawal_id, operator_id=operator_id)
    else:
        withdrawal = withdrawal_reject(withdrawal_id=withdrawal_id, operator_id=operator_id, reason=reason)
    assert before is not None  # else the service raised NotFound
    audit_record(
        actor_id=operator_id,
        action="withdrawal.approve" if approve else "withdrawal.reject",
        object_type="wallets.withdrawal",
        object_id=withdrawal_id,
        before=_withdrawal_state(before),
        after=_withdrawal_state(withdrawal),
    )
    return withdrawal


# Fee schedule changes (maker-checker) --------------------------------------------------------------


def _rate_text(value: Decimal | None) -> str | None:
    return None if value is None else f"{value.normalize():f}"


def _fee_change_state(change: FeeChange) -> dict:
    return {
        "status": change.status,
        "kind": change.kind,
        "schedule": change.schedule_id,
        "name": change.name,
        "maker_rate": _rate_text(change.maker_rate),
        "taker_rate": _rate_text(change.taker_rate),
        "user": change.user_id,
        "memo": change.memo,
    }


_FEE_CHANGE = _Flow(FeeChange, "fee_change", _fee_change_state, permission="backoffice.approve_feechange")
_OWN_FEES = (
    "Operators cannot draft or decide on a change of what they pay: their own fee tier, or the rates of their schedule."
)


def _schedule_state(schedule: FeeSchedule | None) -> dict:
    if schedule is None:
        return {}
    return {
        "name": schedule.name,
        "maker_rate": _rate_text(schedule.maker_rate),
        "taker_rate": _rate_text(schedule.taker_rate),
        "is_default": schedule.is_default,
    }


@transaction.atomic
def fee_change_draft(
    *,
    author_id: int,
    kind: str,
    memo: str,
    schedule_id: int | None = None,
    name: str = "",
    maker_rate: str | Decimal | None = None,
    taker_rate: str | Decimal | None = None,
    user_id: int | None = None,
) -> FeeChange:
    """Draft a change of the fee schedules (:class:`FeeChange`); nothing changes until another operator approves.

    ``kind`` and what it needs: ``create`` (``name``, ``maker_rate``, ``taker_rate``),
    ``rates`` (``schedule_id``, both rates), ``make_default`` (``schedule_id``),
    ``assign_tier`` (``user_id``; ``schedule_id`` or None for the default). Rates are
    fractions (``"0.001"`` is 0.1 %) checked now against ``settings.FEE_RATE_MAX``
    (:func:`apps.orders.services.fee_rate_parse`) and again when applied. Audited.
    Raises :class:`DomainError` (memo, kind, a missing field, a tier for a staff user),
    :class:`~apps.orders.errors.InvalidFeeRate`, :class:`NotFound` (schedule, user),
    :class:`PermissionDenied` (what the author pays: their own tier, or the rates of their schedule),
    :class:`InvalidState` (a change of the same thing awaits a decision: :func:`_pending_fee_change_refuse`).
    """
    memo = reason_checked(memo, field="memo")
    if kind not in FeeChangeKind.values:
        raise DomainError("Unknown kind of fee change.", fields={"kind": f"One of {', '.join(FeeChangeKind.values)}."})
    fields: dict = {"kind": kind, "memo": memo, "created_by_id": author_id}
    if kind in (FeeChangeKind.CREATE, FeeChangeKind.RATES):
        fields["maker_rate"] = fee_rate_parse(_required(maker_rate, "maker_rate"), field="maker_rate")
        fields["taker_rate"] = fee_rate_parse(_required(taker_rate, "taker_rate"), field="taker_rate")
    if kind == FeeChangeKind.CREATE:
        name = _required(name.strip() if isinstance(name, str) else "", "name")
        hidden_characters_refuse(name, field="name")  # a right-to-left override disguised it to the approver
        if len(name) > 64 or FeeSchedule.objects.filter(name=name).exists():
            raise DomainError("Choose a new name of at most 64 characters.", fields={"name": "Taken or too long."})
        fields["name"] = name
    if kind in (FeeChangeKind.RATES, FeeChangeKind.MAKE_DEFAULT) or (
        kind == FeeChangeKind.ASSIGN_TIER and schedule_id is not None
    ):
        schedule = FeeSchedule.objects.filter(id=_required(schedule_id, "schedule")).first()
        if schedule is None:
            raise NotFound("No such fee schedule.", fields={"schedule": "No such fee schedule."})
        if kind != FeeChangeKind.RATES:
            fee_schedule_cap_check(schedule=schedule)
        fields["schedule_id"] = schedule.id
    if kind == FeeChangeKind.ASSIGN_TIER:
        if not get_user_model().objects.filter(id=_required(user_id, "user")).exists():
            raise NotFound("No such user.", fields={"user": "No such user."})
        fields["user_id"] = user_id
    if _own_fees_changed(kind, fields.get("schedule_id"), fields.get("user_id"), author_id):
        field_name = "user" if kind == FeeChangeKind.ASSIGN_TIER else "schedule"
        raise PermissionDenied(_OWN_FEES, fields={field_name: _OWN_FEES})
    if kind == FeeChangeKind.ASSIGN_TIER:
        _staff_tier_refuse(fields["user_id"])
    _pending_fee_change_refuse(kind, fields.get("schedule_id"), fields.get("user_id"), fields.get("name", ""))
    change = FeeChange.objects.create(**fields)
    audit_record(
        actor_id=author_id,
        action="fee_change.draft",
        object_type="backoffice.feechange",
        object_id=change.id,
        before={},
        after=_fee_change_state(change),
    )
    return change


def _staff_tier_refuse(user_id: int) -> None:
    """Refuse a fee tier for a staff user (staff or superuser), as adjustments refuse staff funds: one operator's
    favour to another, approved by a third (break-it review). Raises :class:`DomainError` (field ``user``)."""
    staff = get_user_model().objects.filter(Q(is_staff=True) | Q(is_superuser=True), id=user_id)
    username = staff.values_list("username", flat=True).first()
    if username is not None:
        message = f"Fee tiers are for customers only; {username} is staff."
        raise DomainError(message, fields={"user": message})


def _pending_fee_change_refuse(kind: str, schedule_id: int | None, user_id: int | None, name: str) -> None:
    """Raise :class:`InvalidState` when a change of the same thing awaits a decision: the rates of ``schedule_id``, the
    default, the tier of ``user_id``, a schedule named ``name`` (break-it review: two rate changes of one schedule were
    both approved, the older last, which silently undid the newer). Drafts of one kind are serialised by a transaction
    advisory lock, so two at once cannot both pass."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"fee_change:{kind}"])
    same: dict[str, object] = {}  # make_default: any pending one is the same change
    if kind == FeeChangeKind.RATES:
        same = {"schedule_id": schedule_id}
    elif kind == FeeChangeKind.ASSIGN_TIER:
        same = {"user_id": user_id}
    elif kind == FeeChangeKind.CREATE:
        same = {"name": name}
    first = FeeChange.objects.filter(status=ChangeStatus.DRAFT, kind=kind, **same).order_by("id").first()
    if first is not None:
        raise InvalidState(f"Fee change #{first.id} of the same already awaits a decision: decide it first.")


def _required(value, field: str):
    """``value``, or :class:`DomainError` naming ``field`` when it is missing (``None`` or empty)."""
    if value is None or value == "":
        raise DomainError(f"{field.replace('_', ' ').capitalize()} is required.", fields={field: "Required."})
    return value


def _fee_change_apply(change: FeeChange) -> tuple[str, FeeSchedule | None, dict, dict]:
    """Apply an approved change through :mod:`apps.orders.services`; return the audit action, object and states."""
    # Each kind's fields were required when the draft was made (fee_change_draft); _required re-states it.
    if change.kind == FeeChangeKind.CREATE:
        schedule = fee_schedule_create(
            name=change.name,
            maker_rate=_required(change.maker_rate, "maker_rate"),
            taker_rate=_required(change.taker_rate, "taker_rate"),
        )
        return "fee_schedule.create", schedule, {}, _schedule_state(schedule)
    if change.kind == FeeChangeKind.RATES:
        before = _schedule_state(change.schedule)
        schedule = fee_schedule_rates_update(
            schedule_id=_required(change.schedule_id, "schedule"),
            maker_rate=_required(change.maker_rate, "maker_rate"),
            taker_rate=_required(change.taker_rate, "taker_rate"),
        )
        return "fee_schedule.update", schedule, before, _schedule_state(schedule)
    if change.kind == FeeChangeKind.MAKE_DEFAULT:
        previous = FeeSchedule.objects.filter(is_default=True).first()
        schedule = fee_schedule_make_default(schedule_id=_required(change.schedule_id, "schedule"))
        return (
            "fee_schedule.make_default",
            schedule,
            {"default": previous.name if previous else None},
            {"default": schedule.name},
        )
    user_id = _required(change.user_id, "user")
    _staff_tier_refuse(user_id)  # again: the user may have become staff since the draft (break-it review)
    tier = UserFeeTier.objects.select_related("schedule").filter(user_id=user_id).first()
    fee_tier_assign(user_id=user_id, schedule_id=change.schedule_id)
    before = {"user": user_id, "schedule": tier.schedule.name if tier else None}
    after = {"user": user_id, "schedule": change.schedule.name if change.schedule is not None else None}
    return "fee_tier.assign", change.schedule, before, after


def _own_fees_changed(change_kind: str, schedule_id: int | None, user_id: int | None, operator_id: int) -> bool:
    """Whether a fee change of ``change_kind`` changes what ``operator_id`` pays: their own tier, or the rates of a
    schedule they are on."""
    if change_kind == FeeChangeKind.ASSIGN_TIER:
        return user_id == operator_id
    if change_kind == FeeChangeKind.RATES:
        return UserFeeTier.objects.filter(schedule_id=schedule_id, user_id=operator_id).exists()
    return False


def _fee_change_decide(*, change_id: int, approver_id: int, approve: bool, note: str) -> FeeChange:
    def apply(change: FeeChange) -> _Applied:
        if _own_fees_changed(change.kind, change.schedule_id, change.user_id, approver_id):
            raise PermissionDenied(_OWN_FEES)
        if not approve:
            return _Applied()
        action, schedule, schedule_before, schedule_after = _fee_change_apply(change)
        if schedule is not None:
            change.schedule = schedule
        return _Applied(
            fields=("schedule",),
            audits=(
                {
                    "action": action,
                    "object_type": "orders.feeschedule" if schedule is not None else "auth.user",
                    "object_id": schedule.id if schedule is not None else change.user_id,
                    "before": {**schedule_before, "fee_change": change.id},
                    "after": {**schedule_after, "fee_change": change.id},
                },
            ),
        )

    return _draft_decide(_FEE_CHANGE, change_id, approver_id, approve=approve, note=note, apply=apply)


@retrying_atomic
def fee_change_approve(*, change_id: int, approver_id: int) -> FeeChange:
    """Approve a drafted fee change and apply it in the same transaction; both are audited.

    The approver needs ``backoffice.approve_feechange`` and is neither the author nor the user whose fee tier
    it assigns, nor on the schedule whose rates it changes; the admin also requires their second factor this
    session. Rates are checked against ``settings.FEE_RATE_MAX`` again. Raises :class:`PermissionDenied`, :class:`InvalidState`
    (decided already), :class:`NotFound`, :class:`~apps.orders.errors.InvalidFeeRate`,
    :class:`DomainError` (a name taken meanwhile).
    """
    return _fee_change_decide(change_id=change_id, approver_id=approver_id, approve=True, note="")


@retrying_atomic
def fee_change_reject(*, change_id: int, approver_id: int, note: str) -> FeeChange:
    """Reject a drafted fee change with a ``note`` saying why; nothing is applied. Guards as :func:`fee_change_approve`."""
    return _fee_change_decide(change_id=change_id, approver_id=approver_id, approve=False, note=note)


# Market filter changes (maker-checker) -------------------------------------------------------------


_MARKET_FILTERS = ("min_qty", "max_qty", "min_notional", "market_order_price_band")


def _market_change_state(change: MarketChange) -> dict:
    filters = {name: getattr(change, name) for name in _MARKET_FILTERS}
    return {
        "status": change.status,
        "market": change.market_id,
        "memo": change.memo,
        "market_change": change.id,
        **{name: None if value is None else format_exact(value) for name, value in filters.items()},
    }


_MARKET_CHANGE = _Flow(
    MarketChange, "market_change", _market_change_state, permission="backoffice.approve_marketchange"
)


@transaction.atomic
def market_change_draft(
    *,
    author_id: int,
    market_id: int,
    min_qty: str | Decimal,
    max_qty: str | Decimal,
    min_notional: str | Decimal,
    market_order_price_band: str | Decimal | None,
    memo: str,
) -> MarketChange:
    """Draft new filters for a market (:class:`MarketChange`); nothing changes until another operator approves.

    The values are checked now as :func:`apps.orders.services.market_filters_update` checks them (exact at the
    assets' precision, quantities multiples of the step, ``min_qty <= max_qty``, the band 0.01 to 100 %, ``None``
    for none) and again when applied. Audited (``market_change.draft``). Raises :class:`DomainError` naming the
    field (a value, the memo, filters the market has already), :class:`NotFound` (market), :class:`InvalidState`
    (a change of this market already awaits a decision).
    """
    memo = reason_checked(memo, field="memo")
    market = market_locked(market_id)
    current = market_state(market)
    market_filters_check(
        market,
        min_qty=min_qty,
        max_qty=max_qty,
        min_notional=min_notional,
        market_order_price_band=market_order_price_band,
    )
    if market_state(market) == current:
        message = f"These are {market.symbol}'s filters already."
        raise DomainError(message, fields={"market": message})
    if MarketChange.objects.filter(market_id=market.id, status=ChangeStatus.DRAFT).exists():
        raise InvalidState(f"A change of {market.symbol}'s filters already awaits a decision.")
    change = MarketChange.objects.create(
        market=market,
        memo=memo,
        created_by_id=author_id,
        **{name: getattr(market, name) for name in _MARKET_FILTERS},
    )
    audit_record(
        actor_id=author_id,
        action="market_change.draft",
        object_type="backoffice.marketchange",
        object_id=change.id,
        before={},
        after=_market_change_state(change),
    )
    return change


def _market_change_decide(*, change_id: int, approver_id: int, approve: bool, note: str) -> MarketChange:
    def apply(change: MarketChange) -> _Applied:
        if not approve:
            return _Applied()
        before = market_state(market_locked(change.market_id))
        market = market_filters_update(
            market_id=change.market_id, **{name: getattr(change, name) for name in _MARKET_FILTERS}
        )
        audit = {
            "action": "market.update",
            "object_type": "orders.market",
            "object_id": market.id,
            "before": {**before, "market_change": change.id},
            "after": {**market_state(market), "market_change": change.id},
        }
        return _Applied(audits=(audit,))

    return _draft_decide(_MARKET_CHANGE, change_id, approver_id, approve=approve, note=note, apply=apply)


@retrying_atomic
def market_change_approve(*, change_id: int, approver_id: int) -> MarketChange:
    """Approve a drafted change of a market's filters and apply it (:func:`apps.orders.services.market_filters_update`)
    in the same transaction; both are audited (``market_change.approve``, ``market.update`` with the filters before
    and after). Orders placed afterwards meet the new filters; resting orders are not touched.

    The approver needs ``backoffice.approve_marketchange`` and is not the author; the admin also requires their
    second factor this session. Raises :class:`PermissionDenied`, :class:`InvalidState` (decided already),
    :class:`NotFound`, :class:`DomainError` (the values, checked again).
    """
    return _market_change_decide(change_id=change_id, approver_id=approver_id, approve=True, note="")


@retrying_atomic
def market_change_reject(*, change_id: int, approver_id: int, note: str) -> MarketChange:
    """Reject a drafted change with a ``note`` saying why; the filters stay. Guards as :func:`market_change_approve`."""
    return _market_change_decide(change_id=change_id, approver_id=approver_id, approve=False, note=note)


# Second-factor resets (maker-checker) --------------------------------------------------------------


def _reset_state(reset: SecondFactorReset) -> dict:
    return {"status": reset.status, "user": reset.user_id, "reason": reset.reason}


@transaction.atomic
def second_factor_reset_request(*, user_id: int, operator_id: int, reason: str) -> SecondFactorReset:
    """Ask for the removal of a customer's second factor (every one-time password device), with a ``reason``.

    Nothing is removed until another operator approves. Audited. Raises :class:`DomainError`
    (no reason), :class:`PermissionDenied` (one's own account, or a staff user's), :class:`NotFound` (user),
    :class:`InvalidState` (a request for this user already awaits a decision).
    """
    reason = reason_checked(reason)
    if user_id == operator_id:
        raise PermissionDenied("Operators cannot reset their own second factor.")
    user = get_user_model().objects.select_for_update(of=("self",), no_key=True).filter(id=user_id).first()
    if user is None:
        raise NotFound("No such user.", fields={"user": "No such user."})
    if user.is_staff:
        raise PermissionDenied("A staff user's second factor is not reset from the customer screen.")
    if SecondFactorReset.objects.filter(user_id=user_id, status=ChangeStatus.DRAFT).exists():
        raise InvalidState(f"A second-factor reset of {user.username} already awaits a decision.")
    reset = SecondFactorReset.objects.create(user_id=user_id, reason=reason, created_by_id=operator_id)
    audit_record(
        actor_id=operator_id,
        action="second_factor_reset.request",
        object_type="auth.user",
        object_id=user_id,
        before={},
        after={**_reset_state(reset), "reset": reset.id},
    )
    return reset


_RESET = _Flow(
    SecondFactorReset,
    "second_factor_reset",
    lambda reset: {**_reset_state(reset), "reset": reset.id},
    permission="backoffice.approve_secondfactorreset",
    subject=lambda reset: ("auth.user", reset.user_id),
)


def _decide_reset(*, reset_id: int, approver_id: int, approve: bool, note: str) -> SecondFactorReset:
    def apply(reset: SecondFactorReset) -> _Applied:
        if reset.user_id == approver_id:
            raise PermissionDenied("Operators cannot reset their own second factor.")
        removed = []
        if approve:
            for device in devices_for_user(reset.user, confirmed=None):
                removed.append(device.persistent_id)
                device.delete()
            withdrawals_hold(user_id=reset.user_id, reason=HoldReason.SECOND_FACTOR_REMOVED, actor_id=approver_id)
        return _Applied(after={"removed_devices": removed})

    return _draft_decide(_RESET, reset_id, approver_id, approve=approve, note=note, apply=apply)


@retrying_atomic
def second_factor_reset_approve(*, reset_id: int, approver_id: int) -> SecondFactorReset:
    """Approve a reset: every one-time password device of the customer is deleted (they enrol again) and their
    withdrawals are paused (:mod:`apps.accounts.holds`). Audited.

    The approver needs ``backoffice.approve_secondfactorreset`` and is neither the requester
    nor the customer. Raises :class:`PermissionDenied`, :class:`InvalidState`, :class:`NotFound`.
    """
    return _decide_reset(reset_id=reset_id, approver_id=approver_id, approve=True, note="")


@retrying_atomic
def second_factor_reset_reject(*, reset_id: int, approver_id: int, note: str) -> SecondFactorReset:
    """Reject a reset with a ``note`` saying why; the second factor stays. Guards as :func:`second_factor_reset_approve`."""
    return _decide_reset(reset_id=reset_id, approver_id=approver_id, approve=False, note=note)


# Lifting a withdrawals block: maker-checker ---------------------------------------------------------


def _unblock_state(unblock: WithdrawalsUnblock) -> dict:
    return {"status": unblock.status, "user": unblock.user_id, "reason": unblock.reason, "unblock": unblock.id}


@transaction.atomic
def withdrawals_unblock_request(*, user_id: int, operator_id: int, reason: str) -> WithdrawalsUnblock:
    """Ask to lift the customer's withdrawals block, with a ``reason``; nothing is lifted until another operator
    approves (:func:`withdrawals_unblock_approve`). Audited (``withdrawals_unblock.request``).

    Raises :class:`DomainError` (no reason), :class:`PermissionDenied` (no ``accounts.change_accountrestriction``,
    one's own account), :class:`NotFound` (user), :class:`InvalidState` (withdrawals not blocked, or a request
    already awaits a decision).
    """
    reason = reason_checked(reason)
    restriction_operator_check(operator_id=operator_id, user_id=user_id)
    user = get_user_model().objects.select_for_update(of=("self",), no_key=True).filter(id=user_id).first()
    if user is None:
        raise NotFound("No such user.", fields={"user": "No such user."})
    restriction = account_restriction(user_id=user_id)
    if restriction is None or not restriction.withdrawals_blocked:
        raise InvalidState("Withdrawals are not restricted for this account: nothing to lift.")
    if WithdrawalsUnblock.objects.filter(user_id=user_id, status=ChangeStatus.DRAFT).exists():
        raise InvalidState(f"Lifting {user.username}'s withdrawals block already awaits a decision.")
    unblock = WithdrawalsUnblock.objects.create(user_id=user_id, reason=reason, created_by_id=operator_id)
    audit_record(
        actor_id=operator_id,
        action="withdrawals_unblock.request",
        object_type="auth.user",
        object_id=user_id,
        before={},
        after=_unblock_state(unblock),
    )
    return unblock


_UNBLOCK = _Flow(
    WithdrawalsUnblock,
    "withdrawals_unblock",
    _unblock_state,
    permission="backoffice.approve_withdrawalsunblock",
    subject=lambda unblock: ("auth.user", unblock.user_id),
)


@retrying_atomic
def withdrawals_unblock_approve(*, unblock_id: int, approver_id: int) -> WithdrawalsUnblock:
    """Approve a request: the block is lifted (:func:`apps.accounts.restrictions.account_withdrawals_unblock`, its
    reason the request's). The approver needs ``backoffice.approve_withdrawalsunblock`` and is neither the requester
    nor the customer. Raises :class:`PermissionDenied`, :class:`InvalidState` (decided already, or the block was
    lifted or changed since the request: the system added a failed deposit to it, say), :class:`NotFound`."""

    def apply(unblock: WithdrawalsUnblock) -> _Applied:
        account_withdrawals_unblock(
            user_id=unblock.user_id,
            requested_by_id=unblock.created_by_id,
            approver_id=approver_id,
            reason=unblock.reason,
            asked_at=unblock.created_at,
        )
        return _Applied()

    return _draft_decide(_UNBLOCK, unblock_id, approver_id, approve=True, apply=apply)


@retrying_atomic
def withdrawals_unblock_reject(*, unblock_id: int, approver_id: int, note: str) -> WithdrawalsUnblock:
    """Reject a request with a ``note`` saying why; the block stays. Guards as :func:`withdrawals_unblock_approve`."""
    return _draft_decide(_UNBLOCK, unblock_id, approver_id, approve=False, note=note)
