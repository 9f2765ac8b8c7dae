"""Settings of the REST API server the matching benchmark starts (gunicorn): the local settings without DEBUG
(no query log, no debug pages) and without the API's per-address and per-key rates (every caller is local)."""

from exchange.settings.local import *  # noqa: F403  (a settings module extends another)
from exchange.settings.local import REST_FRAMEWORK

DEBUG = False
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_CLASSES": []}
