"""Test settings: ``make test`` (pytest) against the real PostgreSQL and Redis."""

import os

from .environment import load_local_services_env

load_local_services_env()
os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key")
os.environ.setdefault("CUSTODY_WEBHOOK_SECRET", "test-only-custody-webhook-secret")

from .base import *  # noqa: E402,F403

DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
