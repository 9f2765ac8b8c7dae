"""A PostgreSQL session advisory lock held across several transactions (and calls outside any), released however
the block ends: for a sequence of steps that must not interleave with the same steps of another request."""

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def session_advisory_lock(key: str) -> Iterator[None]:
    """Hold ``pg_advisory_lock(hashtextextended(key, 0))`` on this thread's connection for the block; a second holder
    of the same ``key`` waits. Released at the block's end, or by PostgreSQL if the process dies. Use it outside a
    transaction: a session lock outlives one."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [key])
        try:
            yield
        finally:
            cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [key])
