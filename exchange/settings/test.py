"""Test settings: ``make test`` (pytest) against the real PostgreSQL and Redis."""

import os

from apps.ledger.signing import private_key_generate_hex

from .environment import load_local_services_env

load_local_services_env()
os.environ.setdefault("API_SECRET_ENCRYPTION_KEY", "test-only-api-secret-encryption-key")
os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key")
os.environ.setdefault("CUSTODY_WEBHOOK_SECRET", "test-only-custody-webhook-secret")
# A key generated per test session (worker processes started by the tests inherit it).
os.environ.setdefault("LEDGER_SIGNING_KEY", private_key_generate_hex())

from .base import *  # noqa: E402,F403
from .base import DATABASES, env  # noqa: E402

# runserver (and the live test server) answers each client connection in a thread of its own: a database
# connection kept open per thread would exhaust PostgreSQL's under a burst (hole 8). Close it after each request.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=0)

DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Every test client comes from 127.0.0.1: rate limits are tested on their own, with other addresses.
REST_FRAMEWORK = {
    **REST_FRAMEWORK,  # noqa: F405 (from base)
    "DEFAULT_THROTTLE_RATES": {
        "ip": "100000/min",
        "key": "100000/min",
        "login": "1000/min",
        "signup": "1000/min",
        "password_reset": "1000/min",
    },
}

# Each test session publishes to (and its worker consumes) a queue of its own; the worker
# fixture passes this name on in CELERY_TASK_DEFAULT_QUEUE.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_TASK_DEFAULT_QUEUE") or f"test-{os.getpid()}-{os.urandom(4).hex()}"

# The simulated custody answers at once in tests; it reports two confirmations per deposit
# and charges a network fee, so the network-fee posting and invariant 5 are exercised.
CUSTODY_SIMULATOR_CONFIRMATIONS = 2
CUSTODY_SIMULATOR_DELAY = 0.0
CUSTODY_SIMULATOR_FAILURE_RATE = 0.0
CUSTODY_SIMULATOR_NETWORK_FEES = {"BTC": "0.00001", "USDT": "0.5"}
CUSTODY_SIMULATOR_HTTP_TIMEOUT = 10.0

# Each test session's stream events travel on Redis channels of its own.
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = os.environ.get("STREAMS_CHANNEL_PREFIX") or CELERY_TASK_DEFAULT_QUEUE  # noqa: F405

# Every test's requests to /api/v3/ come from 127.0.0.1 within the same minutes, the live servers'
# too: no request-weight limit between tests (apps/binance/tests set a limit where they test it).
BINANCE_REQUEST_WEIGHT_PER_MINUTE = 10**9

# No sealer runs in tests (Celery beat is not started), so reconcile's journal_sealed check would fail
# any test that posts for longer than the deployed 60 s grace, as long tests do on a loaded machine.
# apps/ledger/tests/test_seal.py sets the grace to 0 where it tests that check.
LEDGER_SEAL_GRACE = 3600

# Tests roll back or empty the database between them while Redis keeps what it holds: a head witnessed by one test
# would be missing from the next one's chain. apps/ledger/tests/test_seal_witness.py turns it on where it tests it.
LEDGER_SEAL_HEAD_WITNESS = False
