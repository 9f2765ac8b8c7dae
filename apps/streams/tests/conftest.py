"""Fixtures of the streams' tests: the orders tests' market and USDT with withdrawal terms.

The live processes (``stream_servers``: two uvicorn processes and the relay) are a session fixture
of the root conftest, shared with the web UI's browser tests: one relay per test database.
"""

import pytest

from apps.orders.tests.conftest import btc_usdt, default_fees  # noqa: F401  (fixtures)


@pytest.fixture
def usdt(db):
    """USDT (6 decimals) on simnet: withdrawals from 1, approved automatically up to 1,000."""
    from decimal import Decimal

    from apps.ledger.tests.factories import AssetFactory

    return AssetFactory(
        code="USDT",
        name="Tether",
        decimals=6,
        network="simnet",
        confirmations_required=1,
        withdrawal_fee=Decimal(0),
        min_withdrawal=Decimal(1),
        withdrawal_auto_approve_limit=Decimal(1000),
        withdrawal_daily_limit=Decimal(100000),
    )
