"""Refusals caused by an operator's restriction of the account (API.md error shape, stable codes)."""

from apps.ledger.errors import DomainError


class TradingFrozen(DomainError):
    """An operator froze this account's trading: no new order is accepted (cancels still are)."""

    code = "trading_frozen"
    status = 403


class WithdrawalsBlocked(DomainError):
    """An operator blocked this account's withdrawals: no withdrawal is accepted or approved."""

    code = "withdrawals_blocked"
    status = 403
