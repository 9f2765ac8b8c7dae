"""Database helpers of the hot paths."""

import enum
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections


class PreparedCursor:
    """A cursor for hot statements: bound server-side and prepared once per connection.

    Django's cursor interpolates parameters into the SQL text, so PostgreSQL parses and
    plans every statement again (planning the order book query costs ten times executing
    it). Used by :func:`apps.ledger.services.entry_post` and the matching engine.
    This cursor (a psycopg server-binding cursor on Django's connection, in the same
    transaction) prepares each statement on first use and sends only parameters after
    that. Database errors are wrapped into Django's exceptions exactly as Django's own
    cursor does, so ``retrying_atomic`` still recognises a deadlock by its SQLSTATE.
    (Prepared statements live on the connection: behind a transaction-mode pooler such
    as PgBouncer, turn them off with ``DATABASE_PREPARED_STATEMENTS=false``.)
    """

    def __init__(self):
        # Django's ``connection`` proxy looks the thread's connection up at every attribute: once here.
        self.connection = connection = connections[DEFAULT_DB_ALIAS]
        connection.ensure_connection()
        self.prepare = settings.DATABASE_PREPARED_STATEMENTS
        raw = connection.connection
        if self.prepare and raw.prepare_threshold is None:
            # Django leaves psycopg's automatic preparation off (None), which also ignores an explicit
            # prepare=True. A threshold no statement reaches keeps it off for everything else (Django's
            # own client-side cursors never prepare) while honouring prepare=True here.
            raw.prepare_threshold = 2**31 - 1
        self.cursor = psycopg.Cursor(raw)

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any]) -> None:
        with self.connection.wrap_database_errors:
            self.cursor.execute(sql, params, prepare=self.prepare)

    def pipeline(self, statements: list[tuple[str, list]]) -> list[list[tuple]]:
        """Run ``statements`` in one round trip (psycopg pipeline mode, with the transaction's BEGIN if
        it has not been sent yet); return each one's rows (none for a statement that returns none). PostgreSQL still runs them one after the
        other, each with its own snapshot, so a read queued behind a lock sees what the lock's previous
        holder committed."""
        raw = self.connection.connection
        cursors = [psycopg.Cursor(raw) for _ in statements]
        try:
            with self.connection.wrap_database_errors:
                with raw.pipeline():
                    for cursor, (sql, params) in zip(cursors, statements, strict=True):
                        cursor.execute(sql, params, prepare=self.prepare)
                return [cursor.fetchall() if cursor.description is not None else [] for cursor in cursors]
        finally:
            for cursor in cursors:
                cursor.close()

    def fetchone(self) -> tuple | None:
        return self.cursor.fetchone()

    def fetchall(self) -> list[tuple]:
        return self.cursor.fetchall()

    def __enter__(self) -> "PreparedCursor":
        return self

    def __exit__(self, *exc_info) -> None:
        self.cursor.close()


def array_literal(values: Iterable[Any]) -> str:
    """``values`` in PostgreSQL's array input syntax (``{1.5,-2,NULL,"a b"}``), the parameter of a
    ``%s::<type>[]`` placeholder, which PostgreSQL reads with the element type's own input function (amounts exactly).

    Elements: ``Decimal`` and ``int`` as their digits, ``None`` as ``NULL``, ``bool`` as ``t`` / ``f``, ``str``
    double-quoted (backslash and double quote escaped), an enum (a model choice) as its value, a ``datetime`` in
    ISO 8601 (quoted). Anything else, a float above all, raises ``TypeError``. Syntax:
    https://www.postgresql.org/docs/current/arrays.html#ARRAYS-IO.

    Why: psycopg dumps a list parameter element by element in Python, about 2.5 µs per ``Decimal`` and 0.5 to 2 µs
    per int or string; this string costs 0.2 to 0.4 µs per element, and a sequencer batch's posting call and
    order updates carry hundreds (``bench/matching.py``, profiled).
    """
    texts = []
    for value in values:  # the usual elements inline, by exact class (a bool is an int too): a call each costs more
        kind = value.__class__
        if kind is Decimal or kind is int:
            texts.append(str(value))
        elif kind is str:
            texts.append(_quoted(value) if '"' in value or "\\" in value else f'"{value}"')
        else:
            texts.append(_element(value))
    return "{" + ",".join(texts) + "}"


def _element(value: Any) -> str:
    kind = value.__class__
    if kind is Decimal or kind is int:
        return str(value)
    if kind is str:
        return _quoted(value)
    if value is None:
        return "NULL"
    if kind is bool:
        return "t" if value else "f"
    if isinstance(value, enum.Enum):  # IntegerChoices and TextChoices are ints and strings too: their value
        return _element(value.value)
    if isinstance(value, datetime):
        return _quoted(value.isoformat())
    if isinstance(value, Decimal | int):  # a subclass of either
        return str(value)
    if isinstance(value, str):
        return _quoted(value)
    raise TypeError(f"{kind.__name__} is not an array element (amounts are Decimal, never float)")


def _quoted(text: str) -> str:
    """``text`` as a quoted array element: backslash and double quote escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
