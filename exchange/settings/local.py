"""Development settings: ``make run`` and ``manage.py`` on a developer machine."""

import os

from .environment import DEV_CUSTODY_WEBHOOK_SECRET, load_local_services_env

load_local_services_env()
os.environ.setdefault("DJANGO_SECRET_KEY", "dev-only-insecure-secret-key")
os.environ.setdefault("CUSTODY_WEBHOOK_SECRET", DEV_CUSTODY_WEBHOOK_SECRET)

from .base import *  # noqa: E402,F403

DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]", "testserver"]
