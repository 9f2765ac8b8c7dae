"""The Celery application: Redis broker, configuration from Django settings (``CELERY_*``)."""

from celery import Celery

# No default settings module here: every import of the ``exchange`` package runs this module, so a default would
# be every script's (``manage.py`` and ``make run`` name the local settings, the servers' entry points
# ``exchange.wsgi`` and ``exchange.asgi`` the production ones); a worker started without DJANGO_SETTINGS_MODULE
# stops at its first read of the settings instead of running the local ones (the simulated custody).

app = Celery("exchange")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="exchange.heartbeat", ignore_result=True)
def heartbeat() -> None:
    """Beat's heartbeat through the task queue (``CELERY_BEAT_SCHEDULE["health-heartbeat"]``): records that a worker
    ran a task now, which ``GET /healthz`` reads (:func:`exchange.health.heartbeat_record`)."""
    from exchange.health import heartbeat_record

    heartbeat_record()
