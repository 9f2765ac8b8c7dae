"""Development settings: ``make run`` and ``manage.py`` on a developer machine."""

import os

from .environment import DEV_CUSTODY_WEBHOOK_SECRET, load_local_services_env, local_signing_key

load_local_services_env()
os.environ.setdefault("DJANGO_SECRET_KEY", "dev-only-insecure-secret-key")
os.environ.setdefault("CUSTODY_WEBHOOK_SECRET", DEV_CUSTODY_WEBHOOK_SECRET)
if not os.environ.get("LEDGER_SIGNING_KEY"):
    os.environ["LEDGER_SIGNING_KEY"] = local_signing_key()

from .base import *  # noqa: E402,F403

DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]", "testserver"]
