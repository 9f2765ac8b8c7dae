"""What the parts of ``GET /healthz`` share: which advisory locks are held, and how long the oldest waiting row waited."""

from datetime import datetime

from django.db import connection
from django.utils import timezone

_HELD = """
    SELECT objid::bigint FROM pg_catalog.pg_locks
    WHERE locktype = 'advisory' AND granted AND classid::bigint = %s AND objsubid = %s
      AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())
"""


def advisory_locks_held(*, classid: int, objsubid: int) -> set[int]:
    """The second keys (``objid``) of the advisory locks some session of this database holds with the first key
    ``classid``. PostgreSQL files ``pg_advisory_lock(a, b)`` (two ``int`` keys) as ``classid`` a, ``objid`` b,
    ``objsubid`` 2, and ``pg_advisory_lock(k)`` (one ``bigint``) as ``classid`` its high 32 bits, ``objid`` its low
    ones, ``objsubid`` 1."""
    with connection.cursor() as cursor:
        cursor.execute(_HELD, [classid, objsubid])
        return {objid for (objid,) in cursor.fetchall()}


def waited_seconds(oldest: datetime | None) -> float:
    """How long ago ``oldest`` (the oldest waiting row's time) was, in seconds; 0 when nothing waits."""
    return 0.0 if oldest is None else (timezone.now() - oldest).total_seconds()
