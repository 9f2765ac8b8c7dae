"""Fixtures of the web UI's tests: USDT with withdrawal terms, the live streams."""

from decimal import Decimal

import pytest

from apps.ledger.tests.factories import AssetFactory


@pytest.fixture
def usdt(db):
    """USDT (6 decimals): fee 1, minimum 1, approved automatically up to 100, daily limit 100,000."""
    return AssetFactory(
        code="USDT",
        name="Tether",
        decimals=6,
        withdrawal_fee=Decimal(1),
        min_withdrawal=Decimal(1),
        withdrawal_auto_approve_limit=Decimal(100),
        withdrawal_daily_limit=Decimal(100000),
    )


@pytest.fixture
def live_streams(stream_servers, settings):
    """The pages open the streams of the live uvicorn process (the relay publishes the test's commits)."""
    settings.STREAMS_URL = f"ws://{stream_servers.webs[0]}"
    return stream_servers
