"""Fixtures of the proof-of-liabilities tests: the standalone verifier, a sealed ledger and a snapshot."""

import pytest

from apps.ledger.seal.services import journal_seal
from apps.ledger.tests.factories import UserFactory, fund
from apps.proofs.services import liabilities_snapshot_take
from tools import verify_liabilities


@pytest.fixture
def verifier():
    """``tools/verify_liabilities.py`` (it imports nothing of the project)."""
    return verify_liabilities


@pytest.fixture
def funded(db, usdt, btc):
    """Three users with balances, one with nothing; everything sealed."""
    users = [UserFactory(username=name) for name in ("ann", "ben", "cat", "dan")]
    fund(users[0], btc, "0.5")
    fund(users[0], usdt, "12")
    fund(users[1], btc, "1.25")
    fund(users[2], usdt, "0.000001")
    journal_seal()
    return users


@pytest.fixture
def snapshot(funded):
    return liabilities_snapshot_take()
