"""Fixtures shared by every app's tests: assets of SCENARIOS.md and users."""

import pytest

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
