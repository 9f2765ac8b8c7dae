"""Fixtures shared by every app's tests: assets of SCENARIOS.md, users, API clients."""

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
