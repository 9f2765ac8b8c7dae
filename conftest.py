"""Fixtures shared by every app's tests: assets of SCENARIOS.md, users, API clients; the browser-test rule."""

import os

import pytest
from rest_framework.test import APIClient

from apps.accounts.services import api_key_create
from apps.accounts.tests.otp import fresh_code
from apps.ledger.tests.factories import AssetFactory, UserFactory
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
def admin_login(client):
    """``admin_login(user)``: log ``client`` in as ``user`` with a confirmed second factor this session."""
    from apps.backoffice.tests.logins import login_with_second_factor

    return lambda user: login_with_second_factor(client, user)


@pytest.fixture
def admin_client(client, admin_user, admin_login):
    """pytest-django's superuser client, with the second factor approvers must confirm."""
    admin_login(admin_user)
    return client
