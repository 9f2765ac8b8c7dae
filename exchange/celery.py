"""The Celery application: Redis broker, configuration from Django settings (``CELERY_*``)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exchange.settings.local")

app = Celery("exchange")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="exchange.heartbeat", ignore_result=True)
def heartbeat() -> None:
    """Beat's heartbeat through the task queue (``CELERY_BEAT_SCHEDULE["health-heartbeat"]``): records that a worker
    ran a task now, which ``GET /healthz`` reads (:func:`exchange.health.heartbeat_record`)."""
    from exchange.health import heartbeat_record

    heartbeat_record()
