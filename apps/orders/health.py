"""The matching engine's part of ``GET /healthz``: is every market served by a sequencer, and is it keeping up?"""

from django.conf import settings

from apps.core.health import advisory_locks_held, waited_seconds

from .models import Command, CommandStatus, Market
from .services.sequencer import ENGINE_LOCK_CLASS


def engine_health() -> str | None:
    """``"ok"`` when every market (halted ones too: their cancels go through it) has a sequencer holding its lock
    (``pg_advisory_lock(ENGINE_LOCK_CLASS, market id)``) and no command has waited longer than
    ``ORDERS_ENGINE_WAIT_SECONDS`` (its caller has been told 504 by then); else what is wrong: ``"no sequencer for
    BTC-USDT, ETH-USDT"`` or ``"commands waiting 14 s"``. ``None`` when orders are matched in their callers
    (``ORDERS_ENGINE=inline``): there is no engine to report."""
    if settings.ORDERS_ENGINE != "sequencer":
        return None
    served = advisory_locks_held(classid=ENGINE_LOCK_CLASS, objsubid=2)
    unserved = Market.objects.exclude(id__in=served).order_by("symbol").values_list("symbol", flat=True)
    if unserved:
        return f"no sequencer for {', '.join(unserved)}"
    pending = Command.objects.filter(status=CommandStatus.PENDING).order_by("id")
    waited = waited_seconds(pending.values_list("created_at", flat=True).first())
    if waited > settings.ORDERS_ENGINE_WAIT_SECONDS:
        return f"commands waiting {waited:.0f} s"
    return "ok"
