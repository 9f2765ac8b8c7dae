"""The stream relay's part of ``GET /healthz``: is a relay publishing the outbox, and is it keeping up?"""

from django.db import connection
from django.utils import timezone

from .models import StreamEvent
from .relay import RELAY_LOCK_KEY

RELAY_BEHIND_SECONDS = 10.0
"""How long the oldest stream event may wait in the outbox before the relay is reported behind (it publishes a
batch per round, rung at each commit: milliseconds when it keeps up)."""

_RELAY_ACTIVE = """
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 1
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND classid::bigint = %s AND objid::bigint = %s
    )
"""
"""Whether a session of this database holds the relay lock (``pg_advisory_lock(RELAY_LOCK_KEY)``, one ``bigint`` key:
its high and low 32 bits in ``classid`` and ``objid``, ``objsubid`` 1)."""


def relay_health() -> str:
    """``"ok"`` when a relay holds the relay lock and no stream event has waited longer than
    :data:`RELAY_BEHIND_SECONDS`; else ``"no relay"`` or ``"events waiting 42 s"``."""
    with connection.cursor() as cursor:
        cursor.execute(_RELAY_ACTIVE, [RELAY_LOCK_KEY >> 32, RELAY_LOCK_KEY & 0xFFFFFFFF])
        (active,) = cursor.fetchone()
    if not active:
        return "no relay"
    oldest = StreamEvent.objects.order_by("id").values_list("created_at", flat=True).first()
    waited = 0.0 if oldest is None else (timezone.now() - oldest).total_seconds()
    if waited > RELAY_BEHIND_SECONDS:
        return f"events waiting {waited:.0f} s"
    return "ok"
