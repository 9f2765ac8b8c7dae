"""Settings of the REST API server the matching benchmark starts (gunicorn): the local settings without DEBUG
(no query log, no debug pages), without the API's per-address and per-key rates (every caller is local), and with
database connections kept as in production (``CONN_MAX_AGE`` 60 s, the base settings' default: gunicorn's sync
workers serve one request at a time each). The local settings close the connection after every request, for
runserver's thread per client; a new PostgreSQL backend per request cost more than the request itself."""

from exchange.settings.local import *  # noqa: F403  (a settings module extends another)
from exchange.settings.local import DATABASES, REST_FRAMEWORK

DEBUG = False
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_CLASSES": []}
DATABASES["default"]["CONN_MAX_AGE"] = 60
