"""The ledger's own refusals (amounts, balance, idempotency), on the shared base of :mod:`apps.core.errors`.

The shared classes (``DomainError``, ``InvalidState``, ``PermissionDenied``, ``NotFound``) are imported from
:mod:`apps.core.errors`, never from here.
"""

from apps.core.errors import DomainError, InvalidState


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


class SealRefused(InvalidState):
    """The sealer will not build on the chain as it is: it lost or changed the block last witnessed outside the
    database, or its newest block does not verify (:mod:`apps.ledger.seal.services`). Nothing was sealed."""

    code = "seal_refused"
