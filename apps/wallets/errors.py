"""The wallets' domain errors, with API.md's error codes; each names the offending input field."""

from apps.core.errors import DomainError


class WithdrawalLimit(DomainError):
    """A withdrawal below the asset's minimum or above the user's daily limit."""

    code = "withdrawal_limit"

    def __init__(self, message: str, *, field: str = "amount"):
        super().__init__(message, fields={field: message})


class CallbackRefused(DomainError):
    """A custody callback that is not signed by the provider, or is stale: HTTP 401."""

    code = "not_authenticated"
    status = 401


class PayloadTooLarge(DomainError):
    """A custody callback body above ``settings.CUSTODY_WEBHOOK_MAX_BODY``: HTTP 413."""

    code = "invalid_request"
    status = 413


class EventNotReady(Exception):
    """A custody event that cannot be applied yet (a withdrawal's outcome before its submission was
    recorded); the processing task retries it later. Never shown to a client."""


class EventRejected(Exception):
    """A custody event that can never be applied as it stands (unknown deposit address, a report
    contradicting what was already recorded); it is kept, marked ``rejected`` with the reason,
    and needs an operator."""
