"""WSGI entry point (gunicorn ``exchange.wsgi``)."""

import os

from django.core.wsgi import get_wsgi_application

# A deployment's servers default to the production settings: unset, gunicorn served the local ones, DEBUG on, to
# any request naming 127.0.0.1 as its host (break-it review). ``make run``, the tests and the benches name theirs.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exchange.settings.production")

application = get_wsgi_application()
