"""WSGI entry point (gunicorn ``exchange.wsgi``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exchange.settings.local")

application = get_wsgi_application()
