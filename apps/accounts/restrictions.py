"""Operators' writes on a customer's account: freezing trading and blocking withdrawals, each audited.

The flags live in :class:`~apps.accounts.models.AccountRestriction`; the services that honour
them read :mod:`apps.accounts.selectors` (``order_place`` refuses with ``trading_frozen``,
``withdrawal_request``, ``withdrawal_confirm`` and ``withdrawal_approve`` with ``withdrawals_blocked``;
``withdrawal_submit`` holds an approved withdrawal back until the block is lifted or an operator rejects it).
A block is ordered against those steps by the lock of :mod:`apps.accounts.locks`.
"""

from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import transaction

from apps.audit.services import audit_record
from apps.core.errors import InvalidState, NotFound, PermissionDenied
from apps.core.reasons import reason_checked

from .locks import withdrawals_lock
from .models import AccountRestriction

CHANGE_PERMISSION = "accounts.change_accountrestriction"

# restriction -> (flag field, reason field, audit action when set, audit action when lifted)
_FLAGS = {
    "trading": ("trading_frozen", "trading_reason", "account.trading_freeze", "account.trading_unfreeze"),
    "withdrawals": (
        "withdrawals_blocked",
        "withdrawals_reason",
        "account.withdrawals_block",
        "account.withdrawals_unblock",
    ),
}
# restriction -> the refusal of lifting it from an account that does not have it
_NOT_SET = {
    "trading": "Trading is not frozen for this account: nothing to lift.",
    "withdrawals": "Withdrawals are not restricted for this account: nothing to lift.",
}


def _state(restriction: AccountRestriction) -> dict:
    return {
        "trading_frozen": restriction.trading_frozen,
        "trading_reason": restriction.trading_reason,
        "withdrawals_blocked": restriction.withdrawals_blocked,
        "withdrawals_reason": restriction.withdrawals_reason,
    }


def restriction_operator_check(*, operator_id: int, user_id: int) -> None:
    """Raise :class:`PermissionDenied` unless ``operator_id`` is active staff with ``accounts.change_accountrestriction``
    acting on another account than their own (``user_id``)."""
    operator = get_user_model().objects.filter(pk=operator_id, is_active=True, is_staff=True).first()
    if operator is None or not operator.has_perm(CHANGE_PERMISSION):
        raise PermissionDenied(f"Restricting accounts needs the {CHANGE_PERMISSION} permission.")
    if operator_id == user_id:
        raise PermissionDenied("Operators cannot change the restrictions of their own account.")


@transaction.atomic
def _restriction_set(
    *, user_id: int, operator_id: int, restriction: str, on: bool, reason: str, asked_at: datetime | None = None
) -> AccountRestriction:
    """Set or lift ``restriction`` (see the callers); ``asked_at``: when the change was asked, refused
    (:class:`InvalidState`) if the restriction changed since."""
    flag = _FLAGS[restriction][0]
    reason = reason_checked(reason)
    restriction_operator_check(operator_id=operator_id, user_id=user_id)
    if not get_user_model().objects.filter(pk=user_id).exists():
        raise NotFound("No such user.", fields={"user": "No such user."})
    if restriction == "withdrawals":
        withdrawals_lock(user_id=user_id, shared=False)  # waits for the withdrawal steps under way
    row, _ = AccountRestriction.objects.select_for_update().get_or_create(
        user_id=user_id, defaults={"updated_by_id": operator_id}
    )
    if not on and not getattr(row, flag):
        raise InvalidState(_NOT_SET[restriction])
    if asked_at is not None and row.updated_at > asked_at:
        raise InvalidState(
            f"The restriction changed after this was asked (now: {getattr(row, _FLAGS[restriction][1])}): ask again."
        )
    return _flag_write(row, restriction=restriction, on=on, reason=reason, operator_id=operator_id)


def _flag_write(
    row: AccountRestriction, *, restriction: str, on: bool, reason: str, operator_id: int | None
) -> AccountRestriction:
    """Set or lift ``restriction`` on ``row`` (locked) with its reason and operator (``None``: the system), and audit
    it with that actor, in the caller's transaction."""
    flag, reason_field, set_action, lift_action = _FLAGS[restriction]
    before = _state(row)
    setattr(row, flag, on)
    setattr(row, reason_field, reason)
    row.updated_by_id = operator_id
    row.save(update_fields=[flag, reason_field, "updated_by", "updated_at"])
    audit_record(
        actor_id=operator_id,
        action=set_action if on else lift_action,
        object_type="auth.user",
        object_id=row.user_id,
        before=before,
        after=_state(row),
    )
    return row


def account_trading_freeze(*, user_id: int, operator_id: int, frozen: bool, reason: str) -> AccountRestriction:
    """Freeze (``frozen=True``) or unfreeze the user's trading, with a ``reason``; audited in the same transaction.

    While frozen, :func:`apps.orders.services.order_place` refuses new orders with
    ``trading_frozen``; open orders stay cancellable. Raises :class:`DomainError` (no reason),
    :class:`PermissionDenied` (the operator lacks ``accounts.change_accountrestriction``, or
    it is their own account), :class:`NotFound` (user), :class:`InvalidState` when unfreezing an account whose
    trading is not frozen (nothing is written: no row, no audit).
    """
    return _restriction_set(user_id=user_id, operator_id=operator_id, restriction="trading", on=frozen, reason=reason)


def account_withdrawals_block(*, user_id: int, operator_id: int, blocked: bool, reason: str) -> AccountRestriction:
    """Block the user's withdrawals (``blocked=True``), with a ``reason``; audited in the same transaction. Lifting
    takes two operators (:func:`account_withdrawals_unblock`): ``blocked=False`` raises :class:`PermissionDenied`.

    While blocked, :func:`apps.wallets.services.withdrawal_request`, ``withdrawal_confirm`` and
    ``withdrawal_approve`` refuse with ``withdrawals_blocked`` (pending withdrawals can still be rejected or
    cancelled), and an approved withdrawal custody does not have stays approved, held, until the block is lifted
    or an operator rejects it (:func:`apps.wallets.services.withdrawal_submit`). It waits for the withdrawal steps
    under way to commit (:mod:`apps.accounts.locks`), so once it returns no withdrawal passes. Raises as
    :func:`account_trading_freeze` (:class:`InvalidState` for unblocking an account whose withdrawals are not
    blocked).
    """
    if not blocked:
        raise PermissionDenied("Lifting a withdrawals block needs a second operator: request it, another approves.")
    return _restriction_set(user_id=user_id, operator_id=operator_id, restriction="withdrawals", on=True, reason=reason)


def account_withdrawals_block_by_system(*, user_id: int, reason: str) -> AccountRestriction:
    """Block the user's withdrawals on the system's own judgement (no operator: ``updated_by`` empty, audited as
    ``account.withdrawals_block`` with no actor), in the caller's transaction: a deposit credited and then reported
    failed by custody (:mod:`apps.wallets.services`), whose coins the user must not withdraw before an operator
    reverses it. A block already in place gets ``reason`` added to its own (and a lift asked before it can no longer be
    approved: :func:`account_withdrawals_unblock`'s ``asked_at``; break-it review: the failed deposit left an
    operator's block as it was, whose lift, asked earlier for another reason, then let the coins out). Lifting it is
    the usual maker-checker. Waits for the user's withdrawal steps under way, as :func:`account_withdrawals_block`."""
    withdrawals_lock(user_id=user_id, shared=False)
    row, _ = AccountRestriction.objects.select_for_update().get_or_create(user_id=user_id)
    if row.withdrawals_blocked:
        reason = f"{row.withdrawals_reason} {reason}"
    return _flag_write(row, restriction="withdrawals", on=True, reason=reason, operator_id=None)


def account_withdrawals_unblock(
    *, user_id: int, requested_by_id: int, approver_id: int, reason: str, asked_at: datetime | None = None
) -> AccountRestriction:
    """Lift the user's withdrawals block, as ``requested_by_id`` asked (with ``reason``) and ``approver_id``, another
    operator, approved (maker-checker: :func:`apps.backoffice.services.withdrawals_unblock_approve`); audited as
    ``account.withdrawals_unblock`` by the approver, in the caller's transaction. The approved withdrawals the block
    held back go out at the next sweep.

    ``asked_at``: when the lift was asked; a block changed since (the system added a failed deposit to it, say) is not
    lifted, :class:`InvalidState`: the operators decide again on what it is now.

    Raises :class:`PermissionDenied` (one operator both asking and approving, or either lacking
    ``accounts.change_accountrestriction``, or their own account), :class:`InvalidState` (not blocked, or changed
    since ``asked_at``), :class:`NotFound`, :class:`DomainError` (no reason)."""
    if requested_by_id == approver_id:
        raise PermissionDenied("Another operator must approve lifting a withdrawals block (four eyes).")
    restriction_operator_check(operator_id=requested_by_id, user_id=user_id)
    return _restriction_set(
        user_id=user_id, operator_id=approver_id, restriction="withdrawals", on=False, reason=reason, asked_at=asked_at
    )
