"""The Celery application: Redis broker, configuration from Django settings (``CELERY_*``)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exchange.settings.local")

app = Celery("exchange")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
