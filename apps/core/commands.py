"""What the verdict commands (``reconcile``, ``journal_verify``) share: a database out of reach is exit 3, one line.

Their exit 1 says the books are wrong, and a monitor acts on it; a database that could not be reached said the same,
with a traceback (break-it review). :func:`database_reachable` turns it into its own exit code and message.
"""

from collections.abc import Iterator
from contextlib import contextmanager

from django.core.management.base import CommandError
from django.db import OperationalError, connection

UNREACHABLE = 3
"""The exit code of a verdict command whose database could not be reached: no verdict either way."""


@contextmanager
def database_reachable() -> Iterator[None]:
    """Run the block with the database connected first; raise :class:`CommandError` (exit :data:`UNREACHABLE`)
    naming the cause when it cannot connect. Errors of a connected database's queries propagate as they are."""
    try:
        connection.ensure_connection()
    except OperationalError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CommandError(
            f"The database could not be reached ({first_line}): no verdict on the books.", returncode=UNREACHABLE
        ) from None
    yield
