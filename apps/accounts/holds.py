"""The pause of a user's withdrawals after a change of how the account is secured (:class:`WithdrawalHold`).

The changes that start it (a password changed or reset, a second factor replaced or removed, an e-mail address
replaced) call :func:`withdrawals_hold` in their own transaction; every withdrawal request and confirmation
refuses while it lasts (:func:`apps.accounts.selectors.withdrawals_held_until`). It takes the user's withdrawal
lock exclusively (:mod:`apps.accounts.locks`), as an operator's block does, so a withdrawal step under way when the
change commits is done first and every step after it sees the pause.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from .locks import withdrawals_lock
from .models import HoldReason, WithdrawalHold


def withdrawals_hold(*, user_id: int, reason: HoldReason) -> datetime | None:
    """Pause the user's withdrawals for ``settings.WITHDRAWAL_SECURITY_HOLD_SECONDS`` from now (none when 0), in
    the caller's transaction; return when the pause ends (None when there is none). A later change moves the end
    forward; an earlier, longer pause is never shortened. Raises nothing of its own."""
    seconds = settings.WITHDRAWAL_SECURITY_HOLD_SECONDS
    if seconds <= 0:
        return None
    withdrawals_lock(user_id=user_id, shared=False)
    until = timezone.now() + timedelta(seconds=seconds)
    hold, created = WithdrawalHold.objects.get_or_create(user_id=user_id, defaults={"until": until, "reason": reason})
    if not created and hold.until < until:
        hold.until, hold.reason = until, reason
        hold.save(update_fields=["until", "reason", "updated_at"])
    return hold.until
