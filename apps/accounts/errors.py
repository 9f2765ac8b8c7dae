"""The accounts app's domain errors (stable codes, API.md): second-factor refusals, which name the ``otp``
field, and refusals caused by an operator's restriction of the account."""

from apps.ledger.errors import DomainError


class SecondFactorRequired(DomainError):
    """The operation needs a second factor and the user has none: they must enrol one first (403)."""

    code = "second_factor_required"
    status = 403

    def __init__(self, message: str):
        super().__init__(message, fields={"otp": message})


class InvalidOtp(DomainError):
    """The one-time password is missing, wrong, expired or already used (403)."""

    code = "invalid_otp"
    status = 403

    def __init__(self, message: str = "A valid one-time password from your authenticator is required."):
        super().__init__(message, fields={"otp": message})


class TradingFrozen(DomainError):
    """An operator froze this account's trading: no new order is accepted (cancels still are)."""

    code = "trading_frozen"
    status = 403


class WithdrawalsBlocked(DomainError):
    """An operator blocked this account's withdrawals: no withdrawal is accepted or approved."""

    code = "withdrawals_blocked"
    status = 403
