"""Base class and helpers shared by the API views of every app: :class:`ScopedApiView`, the query and path
parameter readers, the API's time format. Not a views module (no route points here), so every app's ``apis.py``
may import it (the layers of DESIGN.md section 1, checked by ``lint-imports``)."""

from datetime import UTC, datetime

from rest_framework.views import APIView

from apps.core.errors import DomainError, DuplicateField, NotFound
from exchange.converters import MAX_ID

from .permissions import HasScope
from .schema import ScopedAutoSchema


class ScopedApiView(APIView):
    """An API view for an authenticated user holding ``required_scope`` (``read`` unless overridden).

    ``method_scopes`` (``{"POST": "trade"}``) names another scope for some methods. The scope
    each operation needs is written into its OpenAPI description.
    """

    permission_classes = [HasScope]
    required_scope = "read"
    method_scopes: dict[str, str] = {}
    schema = ScopedAutoSchema()
    # The query parameters the view's GET reads; any other is refused (:func:`check_query_params`).
    query_params: tuple[str, ...] = ()

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if request.method in ("GET", "HEAD") and hasattr(self, "get"):  # else the answer is a 405
            check_query_params(request, self.query_params)


def check_query_params(request, known: tuple[str, ...]) -> None:
    """Refuse a query parameter the view does not read: 400 ``invalid_request`` naming it, never ignored;
    and one given twice (``?limit=5&limit=6``): 400 ``duplicate_field`` (:class:`DuplicateField`) naming it,
    never "one of them wins".

    Checked once authentication, permissions and throttles have passed, for every GET of every
    :class:`ScopedApiView`; the view lists what it reads in ``query_params``.
    """
    repeated = [name for name, values in request.query_params.lists() if len(values) > 1]
    if repeated:
        raise DuplicateField(repeated)
    unknown = sorted(name for name in request.query_params if name not in known)
    if unknown:
        noun = "parameter" if len(unknown) == 1 else "parameters"
        raise DomainError(
            f"Unknown query {noun}: {', '.join(unknown)}.", fields=dict.fromkeys(unknown, "Unknown parameter.")
        )


def whole_number(raw: str) -> int | None:
    """``raw`` as an int when it is ASCII digits with at most 19 after any leading zeros (a bigint's width), else
    ``None``: never ``int()``'s ``ValueError``, as for a digit ``int()`` does not read (``²``, which ``isdigit()``
    admits) or more than 4300 digits (Python's limit on reading an int)."""
    if not raw.isascii() or not raw.isdigit() or len(raw.lstrip("0")) > 19:
        return None
    return int(raw)


def limit_param(request, default: int = 100, maximum: int = 1000) -> int:
    """The ``limit`` query parameter as an int in ``1..maximum``; raises :class:`DomainError` naming ``limit``."""
    raw = request.query_params.get("limit")
    if raw is None:
        return default
    limit = whole_number(raw)
    if limit is None or not 1 <= limit <= maximum:
        raise DomainError(f"limit must be a whole number from 1 to {maximum}.", fields={"limit": "Out of range."})
    return limit


def text_param(request, name: str, *, max_length: int = 64) -> str | None:
    """The query parameter ``name`` (``None`` when absent or empty); raises :class:`DomainError` naming it
    when it is longer than ``max_length`` or holds characters no stored name has (NUL, controls)."""
    raw = request.query_params.get(name)
    if not raw:
        return None
    if len(raw) > max_length or not raw.isprintable():
        raise DomainError(f"{name} is not valid.", fields={name: "Not a valid value."})
    return raw


def path_name(value: str, *, what: str) -> str:
    """A name from the URL path (a market symbol, an asset code); :class:`NotFound` when it cannot be one."""
    if not value or len(value) > 64 or not value.isprintable():
        raise NotFound(f"No such {what}.", fields={what: f"No such {what}."})
    return value


def path_id(value: str, *, what: str) -> int:
    """An object id from the URL path; :class:`NotFound` for anything that is not a possible id (a bigint from 1:
    a longer number too, whatever its length, never reaches the database)."""
    number = whole_number(value)
    if number is None or not 1 <= number <= MAX_ID:
        raise NotFound(f"No such {what}.", fields={what: f"No such {what}."})
    return number


def api_time(value: datetime | None) -> str | None:
    """ISO 8601 UTC with a ``Z`` (``2026-11-30T01:02:03.456789Z``)."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
