"""``GET /healthz``: 200 when every dependency answers, 503 otherwise."""

from django.core.cache import cache
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return "ok"


def _redis() -> str:
    cache.set("healthz", "ok", timeout=5)
    return "ok" if cache.get("healthz") == "ok" else "no answer"


CHECKS = {"database": _database, "redis": _redis}


@require_GET
def healthz(request):
    """Report ``{"database": "ok", "redis": "ok"}``; a failing check reports its error class."""
    report = {}
    for name, check in CHECKS.items():
        try:
            report[name] = check()
        except Exception as exc:  # any failure of a dependency is a health result, not a 500
            report[name] = f"error: {type(exc).__name__}"
    healthy = all(value == "ok" for value in report.values())
    return JsonResponse(report, status=200 if healthy else 503)
