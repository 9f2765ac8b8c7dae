"""The accounts app's domain errors (stable codes, API.md): second-factor refusals, which name the ``otp``
field, and refusals caused by an operator's restriction of the account."""

import math
from datetime import datetime

from django.utils import timezone

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


class SecondFactorLocked(DomainError):
    """Too many wrong codes: django-otp's throttle refuses every code, even a right one, until ``locked_until``
    (HTTP 429, field ``otp``, header ``Retry-After``). ``retry_after`` is the wait in whole seconds (at least 1)."""

    code = "second_factor_locked"
    status = 429

    def __init__(self, *, locked_until: datetime):
        self.locked_until = locked_until
        self.retry_after = max(1, math.ceil((locked_until - timezone.now()).total_seconds()))
        self.headers = {"Retry-After": str(self.retry_after)}
        message = (
            f"Too many wrong codes: wait {self.retry_after} s, then enter the current code "
            "(every code is refused until then)."
        )
        super().__init__(message, fields={"otp": message})


class TradingFrozen(DomainError):
    """An operator froze this account's trading: no new order is accepted (cancels still are)."""

    code = "trading_frozen"
    status = 403


class WithdrawalsBlocked(DomainError):
    """An operator blocked this account's withdrawals: no withdrawal is accepted or approved."""

    code = "withdrawals_blocked"
    status = 403


class PasswordChanged(DomainError):
    """The account's password changed after the caller proved it (HTTP 401): what it asked for needs the current
    one."""

    code = "not_authenticated"
    status = 401

    def __init__(self) -> None:
        super().__init__("The account's password was changed meanwhile: log in again with the current one.")


class WithdrawalsOnHold(DomainError):
    """The account's withdrawals are paused after a change of how it is secured (:mod:`apps.accounts.holds`)."""

    code = "withdrawals_on_hold"
    status = 403

    def __init__(self, until: datetime):
        super().__init__(
            f"Withdrawals are paused until {until:%Y-%m-%d %H:%M} UTC after a change of this account's password, "
            "second factor or e-mail address, a safeguard against account takeover. Contact support if you did "
            "not make that change."
        )


class InvalidPassword(DomainError):
    """The account's password, asked again before a security change, is missing or wrong (HTTP 400, field
    ``password``)."""

    code = "invalid_password"

    def __init__(self, message: str = "Enter your account's password to make this change."):
        super().__init__(message, fields={"password": message})


class TooManyApiKeys(DomainError):
    """The user has ``API_KEY_MAX_ACTIVE`` active API keys already (HTTP 400 ``too_many_api_keys``): revoke one
    first. Binance allows 30 per account; a limit of the account, as ``withdrawal_limit`` is, so a 400 as that."""

    code = "too_many_api_keys"

    def __init__(self, limit: int):
        super().__init__(
            f"You have {limit} active API keys, the most an account may have: revoke one you no longer use first."
        )
