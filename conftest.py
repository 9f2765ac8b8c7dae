"""Fixtures shared by every app's tests: assets and the BTC-USDT market of SCENARIOS.md, users (funded or not), API
clients; the browser-test rule."""

import os
import time
from dataclasses import dataclass
from typing import Any

import pytest
from rest_framework.test import APIClient

from apps.accounts.services import api_key_create
from apps.accounts.tests.otp import fresh_code
from apps.ledger.tests.factories import AssetFactory, UserFactory, fund
from apps.orders.tests.conftest import btc_usdt, default_fees  # noqa: F401  (the orders tests' market, for every app)
from devtools.chromium import CHROMIUM

# .ci/run sets this: under CI a missing browser fails the browser tests instead of skipping them.
REQUIRE_BROWSER_TESTS = "REQUIRE_BROWSER_TESTS"


def pytest_collection_modifyitems(config, items):
    """Skip the browser tests (marked ``browser``) when Debian's Chromium is missing, unless they are required.

    A fresh machine has only Python: ``make test`` then passes and says how to enable them.
    """
    if CHROMIUM.exists() or os.environ.get(REQUIRE_BROWSER_TESTS) == "1":
        return
    skip = pytest.mark.skip(reason=f"no Chromium at {CHROMIUM}: `apt-get install chromium` to run the browser tests")
    for item in items:
        if item.get_closest_marker("browser"):
            item.add_marker(skip)


# Other connections to the test database doing something: a request of the session's live server, a worker's task.
_OTHERS_BUSY = """
    SELECT count(*) FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
      AND (state IN ('idle in transaction', 'idle in transaction (aborted)')
           OR (state = 'active' AND wait_event IS DISTINCT FROM 'advisory'))
"""
FLUSH_WAIT_SECONDS = 10


@pytest.fixture(autouse=True)
def _others_idle_before_flush(request):
    """Before a transactional test's database is emptied (``TRUNCATE`` of every table), wait up to
    ``FLUSH_WAIT_SECONDS`` for the other connections to finish what they are doing.

    A late request to the session's live server (a simulated custody callback of this test, say) still in its
    transaction when the ``TRUNCATE`` starts locks tables in another order: PostgreSQL then aborts one of them as
    a deadlock, and when that is the ``TRUNCATE`` the test errors at teardown. A sequencer waiting for its
    market's advisory lock (a standby) is not waited for.
    """
    marker = request.node.get_closest_marker("django_db")
    transactional = (marker is not None and marker.kwargs.get("transaction", False)) or not {
        "transactional_db",
        "live_server",
    }.isdisjoint(request.fixturenames)
    if not transactional:
        yield
        return
    request.getfixturevalue("_django_db_helper")  # set up first, so torn down (the flush) after this fixture
    yield
    from django.db import connection

    deadline = time.monotonic() + FLUSH_WAIT_SECONDS
    with connection.cursor() as cursor:
        while True:
            cursor.execute(_OTHERS_BUSY)
            if cursor.fetchone()[0] == 0 or time.monotonic() > deadline:
                return
            time.sleep(0.05)


@pytest.fixture
def usdt(db):
    return AssetFactory(code="USDT", name="Tether", decimals=6)


@pytest.fixture
def btc(db):
    return AssetFactory(code="BTC", name="Bitcoin", decimals=8)


@pytest.fixture
def user(db):
    return UserFactory()


@pytest.fixture
def funded_user(btc, usdt):
    """``funded_user(btc="2", usdt="100000")`` -> a new user holding those amounts (exact decimal strings, credited
    from equity through the ledger, :func:`apps.ledger.tests.factories.fund`)."""
    assets = {"btc": btc, "usdt": usdt}

    def make(**amounts: str):
        holder = UserFactory()
        for code, amount in amounts.items():
            fund(holder, assets[code], amount)
        return holder

    return make


@pytest.fixture
def api():
    return APIClient()


@pytest.fixture
def key_for():
    """``key_for(user, "read", "trade")`` -> a raw API key with those scopes.

    A key with ``withdraw`` needs the user's second factor: the user gets an authenticator and its code."""

    def make(user, *scopes):
        otp = fresh_code(user) if "withdraw" in scopes else None
        return api_key_create(user_id=user.id, name="test", scopes=scopes or ("read",), otp=otp).raw_key

    return make


@pytest.fixture
def api_as(key_for):
    """``api_as(user, *scopes)`` -> an APIClient authenticated with a new key of those scopes."""

    def make(user, *scopes):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key_for(user, *scopes)}")
        return client

    return make


@pytest.fixture
def database_connection_lost():
    """This thread's database connection terminated by the server, as a restart or failover would (the test's next
    query fails on it); closed afterwards. Needs ``django_db(transaction=True)``."""
    from django.db import connection, connections

    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    killer = connections.create_connection("default")
    try:
        with killer.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [backend])
    finally:
        killer.close()
    yield
    connection.close()


@pytest.fixture
def redis_unreachable(settings, tmp_path):
    """The default cache (rate counters, throttles) pointed at a Redis socket where no server listens."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"unix://{tmp_path}/no-redis.sock",
        }
    }


@pytest.fixture
def admin_login(client):
    """``admin_login(user)``: log ``client`` in as ``user`` with a confirmed second factor this session."""
    from apps.backoffice.tests.logins import login_with_second_factor

    return lambda user: login_with_second_factor(client, user)


@pytest.fixture
def admin_client(client, admin_user, admin_login):
    """pytest-django's superuser client, with the second factor approvers must confirm."""
    admin_login(admin_user)
    return client


@pytest.fixture
def smtp_server(settings):
    """A real SMTP server (aiosmtpd) in this process; Django's SMTP backend sends to it. ``.mailbox.messages``
    holds what arrived, ``.url`` is the ``EMAIL_URL`` for worker processes."""
    from apps.accounts.tests.mail import SmtpServer

    server = SmtpServer()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
    yield server
    server.stop()


@dataclass
class StreamServers:
    """``webs``: two ``host:port`` of live uvicorn processes (``exchange.asgi``); ``relay`` the stream relay."""

    webs: list
    relay: Any


@pytest.fixture(scope="session")
def stream_servers(django_db_setup, tmp_path_factory):
    """Two uvicorn processes and the relay against the test database, once per session (one relay holds the
    relay lock of a database: a second one would wait). Tests using them are ``transaction=True``."""
    from apps.streams.tests.processes import start_relay, start_web

    log_dir = tmp_path_factory.mktemp("streams")
    processes = []
    try:
        webs = []
        for name in ("web1", "web2"):
            process, address = start_web(log_dir, name)
            processes.append(process)
            webs.append(address)
        relay = start_relay(log_dir)
        processes.append(relay)
        servers = StreamServers(webs, relay)
        yield servers
        processes.append(servers.relay)  # a test may have started another one in its place
    finally:
        for process in processes:
            process.stop()
