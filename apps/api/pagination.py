"""Query parameters of API lists (API.md "Additions"): ``start``/``end`` time filters and cursor pagination.

A list answers the plain JSON array it always did, unless the request gives ``cursor`` or
``paginate=1``: then ``{"results": [...], "next": <cursor or null>}``. A list walks newest
first along a keyset that never changes for a row (its id, or its time and id), so a walk
sees every row that existed when it started exactly once, however many rows are inserted
meanwhile. ``next`` is given whenever a page is full (``limit`` rows) and is ``null`` after a
shorter page.

The cursor is the keyset of the page's last row, signed (:mod:`django.core.signing`, the
``SECRET_KEY``) together with the list's name and scope (the user, or the market of public
trades): a cursor that was altered, or made for another list, user or market, is refused with
400 ``invalid_request`` (field ``cursor``). The lists still filter by the requesting user, so
even a valid cursor never reaches anyone else's rows.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from django.core import signing
from rest_framework.response import Response

from apps.core.errors import DomainError

from .base import limit_param

Row = TypeVar("Row")  # one row of a list endpoint (a model instance, a selector's named tuple)

# The query parameters every paginated list accepts, on top of its own filters.
LIST_PARAMS = ("cursor", "paginate", "start", "end", "limit")

KeyPart = type[int] | type[datetime]


def time_param(request, name: str) -> datetime | None:
    """The query parameter ``name`` as an aware datetime (ISO 8601; without an offset it is UTC).

    ``None`` when absent; raises :class:`DomainError` naming ``name`` when malformed.
    """
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw) if len(raw) <= 64 else None
        # In UTC: PostgreSQL takes no offset beyond 15:59, and 0001-01-01 with an offset is out of range.
        value = value and (value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC))
    except (ValueError, OverflowError):
        value = None
    if value is None:
        message = "Must be an ISO 8601 time, such as 2026-12-01T12:00:00Z."
        raise DomainError(f"{name}: {message}", fields={name: message})
    return value


def time_window(request) -> tuple[datetime | None, datetime | None]:
    """``(start, end)`` from the query: ``start`` inclusive, ``end`` exclusive; ``end`` must be after ``start``."""
    start, end = time_param(request, "start"), time_param(request, "end")
    if start is not None and end is not None and end <= start:
        raise DomainError("end must be later than start.", fields={"end": "Must be later than start."})
    return start, end


@dataclass(frozen=True)
class Page:
    """What a list request asks for: ``limit`` rows from the keyset ``before`` on (exclusive; ``None``:
    from the newest), within ``[start, end)``; ``paginated`` when the answer is a page with ``next``."""

    limit: int
    start: datetime | None
    end: datetime | None
    before: tuple | None
    paginated: bool
    salt: str


def _salt(list_name: str, scope: str) -> str:
    return f"apps.api.pagination:{list_name}:{scope}"


def page_params(request, *, list_name: str, scope: str, key: tuple[KeyPart, ...], default_limit: int = 100) -> Page:
    """Read ``cursor``, ``paginate``, ``start``, ``end`` and ``limit`` for the list ``list_name``.

    ``scope`` names whose rows the list holds (``"user:<id>"``, ``"market:<symbol>"``); ``key``
    the types of the keyset (``(int,)`` for an id; ``(datetime, int, int)``...); ``limit`` is
    ``default_limit`` when not given. Raises
    :class:`DomainError` naming the parameter.
    """
    salt = _salt(list_name, scope)
    raw_paginate = request.query_params.get("paginate")
    if raw_paginate not in (None, "0", "1", "true", "false"):
        raise DomainError("paginate must be 1 or 0.", fields={"paginate": "Must be 1 or 0."})
    raw_cursor = request.query_params.get("cursor")
    before = None if not raw_cursor else _cursor_decode(raw_cursor, salt=salt, key=key)
    start, end = time_window(request)
    return Page(
        limit=limit_param(request, default=default_limit),
        start=start,
        end=end,
        before=before,
        paginated=raw_cursor is not None or raw_paginate in ("1", "true"),
        salt=salt,
    )


def _cursor_decode(raw: str, *, salt: str, key: tuple[KeyPart, ...]) -> tuple:
    refused = DomainError("cursor is not valid for this list.", fields={"cursor": "Not a valid cursor."})
    try:
        values = signing.loads(raw, salt=salt) if len(raw) <= 512 else None
    except signing.BadSignature:
        raise refused from None
    if not isinstance(values, list) or len(values) != len(key):
        raise refused
    decoded: list[int | datetime] = []
    for value, kind in zip(values, key, strict=True):
        if kind is datetime:
            if not isinstance(value, str):
                raise refused
            decoded.append(datetime.fromisoformat(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            decoded.append(value)
        else:
            raise refused
    return tuple(decoded)


def _cursor_encode(values: tuple, *, salt: str) -> str:
    return signing.dumps([v.isoformat() if isinstance(v, datetime) else v for v in values], salt=salt)


def page_response(
    page: Page, rows: Iterable[Row], *, key_of: Callable[[Row], tuple], out: Callable[[Row], object]
) -> Response:
    """The answer of a list: the plain list of ``out(row)``, or with pagination ``{"results", "next"}``.

    ``rows`` are at most ``page.limit`` rows in the list's order; ``key_of(row)`` is a row's keyset.
    """
    rows = list(rows)
    results = [out(row) for row in rows]
    if not page.paginated:
        return Response(results)
    full = len(rows) == page.limit
    return Response({"results": results, "next": _cursor_encode(key_of(rows[-1]), salt=page.salt) if full else None})


def id_page(queryset, page: Page, *, time_field: str = "created_at"):
    """``queryset`` (newest first by ``-id``) cut to the page: ids below the cursor's, within the time window."""
    if page.before is not None:
        queryset = queryset.filter(id__lt=page.before[0])
    if page.start is not None:
        queryset = queryset.filter(**{f"{time_field}__gte": page.start})
    if page.end is not None:
        queryset = queryset.filter(**{f"{time_field}__lt": page.end})
    return queryset[: page.limit]
