"""The domain's exception base: each error has a stable ``code`` (API.md's error codes) and an HTTP ``status``.

Every app raises subclasses of :class:`DomainError`; the API's exception handler maps
``code``, ``status`` and ``fields`` to the error body, management commands print
``message`` and exit non-zero. Errors of one app's own rules live in that app
(``apps.ledger.errors``, ``apps.orders.errors``, ``apps.wallets.errors``).
"""

from collections import Counter


class DomainError(Exception):
    """A refused request: nothing was written. ``fields`` maps input field names to messages."""

    code = "invalid_request"
    status = 400

    def __init__(self, message: str, *, fields: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.fields = fields or {}


class DuplicateField(DomainError):
    """A field given twice: twice in one JSON object, or a query parameter repeated (400 ``duplicate_field``).

    Refused rather than letting one value win, so that ``{"qty": "0.01", "qty": "50"}`` cannot mean the
    50 a proxy or a log did not show (/api/v3 answers -1101 for the same).
    """

    code = "duplicate_field"

    def __init__(self, names):
        names = sorted(set(names))
        noun = "field" if len(names) == 1 else "fields"
        super().__init__(
            f"Duplicate {noun}: {', '.join(names)} (give each once).",
            fields=dict.fromkeys(names, "Given more than once."),
        )


def object_without_duplicates(pairs: list[tuple[str, object]]) -> dict:
    """One JSON object as a dict (``json.loads``'s ``object_pairs_hook``); :class:`DuplicateField` naming every key
    given more than once."""
    counts = Counter(key for key, _ in pairs)
    if len(counts) != len(pairs):
        raise DuplicateField([key for key, count in counts.items() if count > 1])
    return dict(pairs)


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


class InvalidAddress(DomainError):
    """An address that is not valid on its network (a withdrawal, the address book, an API key's allow-list)."""

    code = "invalid_address"

    def __init__(self, message: str, *, field: str = "address"):
        super().__init__(message, fields={field: message})


def violated_constraint(error: Exception) -> str | None:
    """The name of the constraint or unique index an ``IntegrityError`` from PostgreSQL reports (psycopg's
    ``diag.constraint_name``), or None when it names none."""
    return getattr(getattr(error.__cause__, "diag", None), "constraint_name", None)
