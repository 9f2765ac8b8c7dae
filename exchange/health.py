"""``GET /healthz``: 200 when the database, Redis, a Celery worker, the journal's sealer, the matching engine and the
stream relay answer, 503 otherwise."""

import time

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from apps.ledger.seal.health import journal_health
from apps.orders.health import engine_health
from apps.streams.health import relay_health


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return "ok"


def _redis() -> str:
    cache.set("healthz", "ok", timeout=5)
    return "ok" if cache.get("healthz") == "ok" else "no answer"


def heartbeat_key() -> str:
    """The cache key of this deployment's heartbeat (its task queue's name: deployments and test sessions sharing a
    Redis server each have their own)."""
    return f"health:heartbeat:{settings.CELERY_TASK_DEFAULT_QUEUE}"


def heartbeat_record() -> None:
    """Record that a heartbeat task ran now (seconds since the epoch); :func:`exchange.celery.heartbeat` calls it."""
    cache.set(heartbeat_key(), time.time(), timeout=None)


def _worker() -> str:
    """A heartbeat task, sent by beat every ``HEALTH_HEARTBEAT_SECONDS`` through this deployment's queue, ran within
    ``HEALTH_HEARTBEAT_MAX_AGE`` seconds: a worker takes tasks from the queue and its pool runs them, and beat (the
    sealer's, sweeps' and reconciliation's clock) sends them. One cache read. It replaced asking the workers over
    Celery's control broadcast, which waited its whole timeout (1 s of a web worker per probe), and was answered
    by a worker whose pool ran nothing, and said nothing of beat (break-it review)."""
    last = cache.get(heartbeat_key())
    if last is None:
        return "no task run yet (worker or beat down)"
    age = time.time() - float(last)
    if age > settings.HEALTH_HEARTBEAT_MAX_AGE:
        return f"no task run for {age:.0f} s (worker or beat down)"
    return "ok"


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

NEEDS_REDIS = ("worker", "journal")
"""The checks that read Redis (the heartbeat, the journal's head witness): once the ``redis`` check has failed they
are reported not checked instead of run, so a probe waits for one Redis timeout, not three (break-it review: with
Redis hung a probe took 6 s, past a supervisor's 5 s timeout, and called the journal ok without having looked)."""


@require_GET
def healthz(request):
    """Report ``{"database": "ok", "redis": "ok", "worker": "ok", "journal": "ok", "engine": "ok", "relay": "ok"}`` (no ``engine``
    with ``ORDERS_ENGINE=inline``); a failing check reports why."""
    report = {}
    for name, check in CHECKS.items():
        if name in NEEDS_REDIS and report.get("redis") != "ok":
            report[name] = "not checked (redis down)"
            continue
        try:
            result = check()
        except Exception as exc:  # any failure of a dependency is a health result, not a 500
            result = f"error: {type(exc).__name__}"
        if result is not None:
            report[name] = result
    healthy = all(value == "ok" for value in report.values())
    return JsonResponse(report, status=200 if healthy else 503)
