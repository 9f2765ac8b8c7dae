"""Reads of the accounts app: the restrictions operators set on an account."""

from .models import AccountRestriction


def account_restriction(*, user_id: int) -> AccountRestriction | None:
    """The user's restriction row (flags, reasons, who changed them last), or None when never restricted."""
    return AccountRestriction.objects.select_related("updated_by").filter(user_id=user_id).first()


def trading_frozen(*, user_id: int) -> bool:
    """Whether an operator froze the user's trading (new orders are refused)."""
    return AccountRestriction.objects.filter(user_id=user_id, trading_frozen=True).exists()


def withdrawals_blocked(*, user_id: int) -> bool:
    """Whether an operator blocked the user's withdrawals (new withdrawals and approvals are refused)."""
    return AccountRestriction.objects.filter(user_id=user_id, withdrawals_blocked=True).exists()
