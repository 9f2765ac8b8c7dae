"""Settings for mypy's django-stubs plugin (``make lint``, the pre-commit hook): the test settings with
placeholder service URLs, so type checking needs no running PostgreSQL or Redis (the plugin reads the
settings and the app registry; it never connects)."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://typecheck@localhost/typecheck")
os.environ.setdefault("REDIS_URL", "redis://localhost:6379/0")

from .test import *  # noqa: E402,F403
