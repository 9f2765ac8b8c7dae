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

# Every test client comes from 127.0.0.1: rate limits are tested on their own, with other addresses.
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"ip": "100000/min", "key": "100000/min", "login": "1000/min"}}  # noqa: F405
