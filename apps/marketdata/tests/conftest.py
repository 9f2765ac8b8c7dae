"""Fixtures of the market data tests: the orders tests' market (BTC-USDT of SCENARIOS.md) and fee schedule."""

from apps.orders.tests.conftest import btc_usdt, default_fees  # noqa: F401  (fixtures)
