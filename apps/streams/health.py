"""The stream relay's part of ``GET /healthz``: is a relay publishing the outbox, and is it keeping up?"""

from apps.core.health import advisory_locks_held, waited_seconds

from .models import StreamEvent
from .relay import RELAY_LOCK_KEY

RELAY_BEHIND_SECONDS = 10.0
"""How long the oldest stream event may wait in the outbox before the relay is reported behind (it publishes a
batch per round, rung at each commit: milliseconds when it keeps up)."""


def relay_health() -> str:
    """``"ok"`` when a relay holds the relay lock (``pg_advisory_lock(RELAY_LOCK_KEY)``, one ``bigint`` key) and no
    stream event has waited longer than :data:`RELAY_BEHIND_SECONDS`; else ``"no relay"`` or ``"events waiting
    42 s"``."""
    held = advisory_locks_held(classid=RELAY_LOCK_KEY >> 32, objsubid=1)
    if RELAY_LOCK_KEY & 0xFFFFFFFF not in held:
        return "no relay"
    waited = waited_seconds(StreamEvent.objects.order_by("id").values_list("created_at", flat=True).first())
    if waited > RELAY_BEHIND_SECONDS:
        return f"events waiting {waited:.0f} s"
    return "ok"
