"""``GET /healthz``: 200 when the database, Redis, a Celery worker, the journal's sealer, the matching engine and the
stream relay answer, 503 otherwise."""

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from apps.ledger.seal.health import journal_health
from apps.orders.health import engine_health
from apps.streams.health import relay_health
from exchange.celery import app as celery_app

WORKER_PING_TIMEOUT = 1.0


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return "ok"


def _redis() -> str:
    cache.set("healthz", "ok", timeout=5)
    return "ok" if cache.get("healthz") == "ok" else "no answer"


def _worker() -> str:
    """A worker answers and consumes this deployment's task queue."""
    queues = celery_app.control.inspect(timeout=WORKER_PING_TIMEOUT).active_queues() or {}
    serving = [
        name
        for name, consumed in queues.items()
        if any(queue["name"] == settings.CELERY_TASK_DEFAULT_QUEUE for queue in consumed)
    ]
    return "ok" if serving else "no worker"


CHECKS = {
    "database": _database,
    "redis": _redis,
    "worker": _worker,
    "journal": journal_health,
    "engine": engine_health,
    "relay": relay_health,
}
"""Each check returns ``"ok"``, what is wrong, or ``None`` when it does not apply here (the engine when orders are
matched inline)."""


@require_GET
def healthz(request):
    """Report ``{"database": "ok", "redis": "ok", "worker": "ok", "journal": "ok", "engine": "ok", "relay": "ok"}`` (no ``engine``
    with ``ORDERS_ENGINE=inline``); a failing check reports why."""
    report = {}
    for name, check in CHECKS.items():
        try:
            result = check()
        except Exception as exc:  # any failure of a dependency is a health result, not a 500
            result = f"error: {type(exc).__name__}"
        if result is not None:
            report[name] = result
    healthy = all(value == "ok" for value in report.values())
    return JsonResponse(report, status=200 if healthy else 503)
