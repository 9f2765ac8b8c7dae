"""Development settings: ``make run`` and ``manage.py`` on a developer machine."""

import os

from .environment import DEV_CUSTODY_WEBHOOK_SECRET, load_local_services_env

load_local_services_env()
os.environ.setdefault("API_SECRET_ENCRYPTION_KEY", "dev-only-api-secret-encryption-key")
os.environ.setdefault("DJANGO_SECRET_KEY", "dev-only-insecure-secret-key")
os.environ.setdefault("CUSTODY_WEBHOOK_SECRET", DEV_CUSTODY_WEBHOOK_SECRET)

from .base import *  # noqa: E402,F403
from .base import DATABASES, env  # noqa: E402

# runserver (and the live test server) answers each client connection in a thread of its own: a database
# connection kept open per thread would exhaust PostgreSQL's under a burst (hole 8). Close it after each request.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=0)

DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]", "testserver"]
