"""Base class and helpers shared by the API views of every app."""

from datetime import datetime
from datetime import timezone as dt_timezone

from rest_framework.views import APIView

from apps.ledger.errors import DomainError

from .permissions import HasScope


class ScopedApiView(APIView):
    """An API view for an authenticated user holding ``required_scope`` (``read`` unless overridden)."""

    permission_classes = [HasScope]
    required_scope = "read"


def limit_param(request, default: int = 100, maximum: int = 1000) -> int:
    """The ``limit`` query parameter as an int in ``1..maximum``; raises :class:`DomainError` naming ``limit``."""
    raw = request.query_params.get("limit")
    if raw is None:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= maximum:
        raise DomainError(f"limit must be a whole number from 1 to {maximum}.", fields={"limit": "Out of range."})
    return int(raw)


def api_time(value: datetime | None) -> str | None:
    """ISO 8601 UTC with a ``Z`` (``2026-11-30T01:02:03.456789Z``)."""
    if value is None:
        return None
    return value.astimezone(dt_timezone.utc).isoformat().replace("+00:00", "Z")
