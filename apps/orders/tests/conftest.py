"""Fixtures of the orders tests: the default fee schedule and the BTC-USDT market of SCENARIOS.md."""

from decimal import Decimal

import pytest

from apps.orders.models import FeeSchedule
from apps.orders.services import market_create


@pytest.fixture
def default_fees(db) -> FeeSchedule:
    """Maker 0.1 %, taker 0.1 % (SCENARIOS.md); recreated because transactional tests empty the tables."""
    schedule, _ = FeeSchedule.objects.update_or_create(
        is_default=True, defaults={"name": "default", "maker_rate": Decimal("0.001"), "taker_rate": Decimal("0.001")}
    )
    return schedule


@pytest.fixture
def btc_usdt(btc, usdt, default_fees):
    """SCENARIOS.md's market: tick 0.01 USDT, step 0.0001 BTC, min notional 1 USDT."""
    return market_create(
        base=btc,
        quote=usdt,
        tick_size=Decimal("0.01"),
        step_size=Decimal("0.0001"),
        min_qty=Decimal("0.0001"),
        max_qty=Decimal("1000"),
        min_notional=Decimal("1"),
    )
