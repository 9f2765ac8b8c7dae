"""The pause of a user's withdrawals after a change of how the account is secured (:class:`WithdrawalHold`).

The changes that start it (a password changed or reset, a second factor replaced or removed, an e-mail address
replaced) call :func:`withdrawals_hold` in their own transaction; withdrawal requests, confirmations and approvals
are refused, and hand-overs to custody held back, while it lasts (:func:`apps.accounts.selectors.withdrawal_hold`). It takes the user's withdrawal
lock exclusively (:mod:`apps.accounts.locks`), as an operator's block does, so a withdrawal step under way when the
change commits is done first and every step after it sees the pause.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from apps.audit.services import audit_record

from .locks import withdrawals_lock
from .models import HoldReason, WithdrawalHold


def withdrawals_hold(*, user_id: int, reason: HoldReason, actor_id: int) -> datetime | None:
    """Pause the user's withdrawals for ``settings.WITHDRAWAL_SECURITY_HOLD_SECONDS`` from now (none when 0), in
    the caller's transaction, audited (``withdrawals.paused``, ``actor_id`` the one who made the change: the user,
    or the operator who approved a second-factor reset); return when the pause ends (None when there is none). A
    later change moves the end forward; an earlier, longer pause is never shortened. Raises nothing of its own."""
    seconds = settings.WITHDRAWAL_SECURITY_HOLD_SECONDS
    if seconds <= 0:
        return None
    withdrawals_lock(user_id=user_id, shared=False)
    until = timezone.now() + timedelta(seconds=seconds)
    hold = WithdrawalHold.objects.select_for_update().filter(user_id=user_id).first()
    before = {} if hold is None else {"until": hold.until.isoformat(), "reason": hold.reason}
    if hold is None:
        hold = WithdrawalHold.objects.create(user_id=user_id, until=until, reason=reason)
    elif hold.until < until:
        hold.until, hold.reason = until, reason
        hold.save(update_fields=["until", "reason", "updated_at"])
    audit_record(
        actor_id=actor_id,
        action="withdrawals.paused",
        object_type="auth.user",
        object_id=user_id,
        before=before,
        after={"until": hold.until.isoformat(), "reason": hold.reason},
    )
    return hold.until
