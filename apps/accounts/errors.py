"""The accounts app's domain errors (stable codes, API.md): second-factor refusals, which name the ``otp``
field, and refusals caused by an operator's restriction of the account."""

from apps.core.errors import DomainError, PermissionDenied


class SecondFactorRequired(PermissionDenied):
    """The action needs a second factor and the user has none yet: enrol one first (HTTP 403, field ``otp``)."""

    code = "second_factor_required"

    def __init__(self, message: str = "Set up a second factor (an authenticator app) first."):
        super().__init__(message, fields={"otp": message})


class InvalidOtp(DomainError):
    """A missing, wrong, expired or already used one-time password (HTTP 400, field ``otp``)."""

    code = "invalid_otp"

    def __init__(self, message: str = "A valid code from your authenticator app (or a recovery code) is required."):
        super().__init__(message, fields={"otp": message})


class TradingFrozen(DomainError):
    """An operator froze this account's trading: no new order is accepted (cancels still are)."""

    code = "trading_frozen"
    status = 403


class WithdrawalsBlocked(DomainError):
    """An operator blocked this account's withdrawals: no withdrawal is accepted or approved."""

    code = "withdrawals_blocked"
    status = 403
