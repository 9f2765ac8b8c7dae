"""The matching engine's part of ``GET /healthz``: is every market served by a sequencer, and is it keeping up?"""

from django.conf import settings
from django.db import connection
from django.utils import timezone

from .models import Command, CommandStatus
from .services.sequencer import ENGINE_LOCK_CLASS

_UNSERVED = """
    SELECT m.symbol FROM orders_market m
    WHERE NOT EXISTS (
        SELECT 1 FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid::bigint = %s AND l.objid::bigint = m.id
    )
    ORDER BY m.symbol
"""
"""The symbols of the markets whose sequencer lock (``pg_advisory_lock(ENGINE_LOCK_CLASS, market id)``, a two-key
lock: ``objsubid`` 2) no session of this database holds."""


def engine_health() -> str | None:
    """``"ok"`` when every market (halted ones too: their cancels go through it) has a sequencer holding its lock and
    no command has waited longer than ``ORDERS_ENGINE_WAIT_SECONDS`` (its caller has been told 504 by then); else
    what is wrong: ``"no sequencer for BTC-USDT, ETH-USDT"`` or ``"commands waiting 14 s"``. ``None`` when orders
    are matched in their callers (``ORDERS_ENGINE=inline``): there is no engine to report."""
    if settings.ORDERS_ENGINE != "sequencer":
        return None
    with connection.cursor() as cursor:
        cursor.execute(_UNSERVED, [ENGINE_LOCK_CLASS])
        unserved = [symbol for (symbol,) in cursor.fetchall()]
    if unserved:
        return f"no sequencer for {', '.join(unserved)}"
    pending = Command.objects.filter(status=CommandStatus.PENDING).order_by("id")
    oldest = pending.values_list("created_at", flat=True).first()
    waited = 0.0 if oldest is None else (timezone.now() - oldest).total_seconds()
    if waited > settings.ORDERS_ENGINE_WAIT_SECONDS:
        return f"commands waiting {waited:.0f} s"
    return "ok"
