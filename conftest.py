"""Fixtures shared by every app's tests: assets of SCENARIOS.md, users, API clients."""

from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from apps.accounts.services import api_key_create
from apps.ledger.tests.factories import AssetFactory, UserFactory


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
def api():
    return APIClient()


@pytest.fixture
def key_for():
    """``key_for(user, "read", "trade")`` -> a raw API key with those scopes."""

    def make(user, *scopes):
        return api_key_create(user_id=user.id, name="test", scopes=scopes or ("read",))[1]

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
def admin_login(client):
    """``admin_login(user)``: log ``client`` in as ``user`` with a confirmed second factor this session."""
    from apps.backoffice.tests.logins import login_with_second_factor

    return lambda user: login_with_second_factor(client, user)


@pytest.fixture
def admin_client(client, admin_user, admin_login):
    """pytest-django's superuser client, with the second factor approvers must confirm."""
    admin_login(admin_user)
    return client


@dataclass
class StreamServers:
    """``webs``: two ``host:port`` of live uvicorn processes (``exchange.asgi``); ``relay`` the stream relay."""

    webs: list
    relay: object


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
        yield StreamServers(webs, relay)
    finally:
        for process in processes:
            process.stop()
