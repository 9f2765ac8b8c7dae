"""The domain's exception hierarchy: each error has a stable ``code`` (API.md's error codes).

Every app raises subclasses of :class:`DomainError`; the API's exception handler
maps ``code``, ``status`` and ``fields`` to the error body, management commands
print ``message`` and exit non-zero.
"""


class DomainError(Exception):
    """A refused request: nothing was written. ``fields`` maps input field names to messages."""

    code = "invalid_request"
    status = 400

    def __init__(self, message: str, *, fields: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.fields = fields or {}


class InvalidAmount(DomainError):
    """An amount that is not a finite, positive, exact multiple of its asset's precision."""

    def __init__(self, message: str, *, field: str = "amount"):
        super().__init__(message, fields={field: message})
        self.field = field


class UnbalancedEntry(DomainError):
    """Journal entry legs that do not sum to zero per asset, or fewer than two legs."""


class InsufficientFunds(DomainError):
    """A posting would take a user account below zero."""

    code = "insufficient_funds"


class IdempotencyConflict(DomainError):
    """An idempotency key replayed with a different payload."""

    code = "idempotency_conflict"
    status = 409


class InvalidState(DomainError):
    """A state transition that the object's current state does not allow."""

    code = "invalid_state"
    status = 409


class PermissionDenied(DomainError):
    """The actor may not do this (for example approve their own draft)."""

    code = "permission_denied"
    status = 403


class NotFound(DomainError):
    """A referenced object does not exist (or belongs to someone else)."""

    code = "not_found"
    status = 404
