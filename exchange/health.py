"""``GET /healthz``: 200 when the database, Redis and a Celery worker answer, 503 otherwise."""

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

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


CHECKS = {"database": _database, "redis": _redis, "worker": _worker}


@require_GET
def healthz(request):
    """Report ``{"database": "ok", "redis": "ok", "worker": "ok"}``; a failing check reports why."""
    report = {}
    for name, check in CHECKS.items():
        try:
            report[name] = check()
        except Exception as exc:  # any failure of a dependency is a health result, not a 500
            report[name] = f"error: {type(exc).__name__}"
    healthy = all(value == "ok" for value in report.values())
    return JsonResponse(report, status=200 if healthy else 503)
