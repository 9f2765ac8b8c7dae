from collections import defaultdict
from decimal import Decimal

import pytest

from apps.ledger import reconciliation


@pytest.fixture
def declared_holds(monkeypatch) -> dict[tuple[int, int], Decimal]:
    """Play the part of the apps that hold funds (invariant 4): ``{(user id, asset id): amount}``.

    Replaces the registered hold sources for the test, so only what the test declares explains held funds.
    """
    holds: dict[tuple[int, int], Decimal] = defaultdict(Decimal)
    monkeypatch.setattr(reconciliation, "_hold_sources", [lambda scope: dict(holds)])
    return holds


@pytest.fixture(autouse=True)
def ledger_checks_only(monkeypatch):
    """The ledger's tests check the ledger's own invariants.

    They fund users with ``fund()``, a deposit no custody provider ever saw, so the checks other
    apps register (custody holdings, invariant 5; deposits and withdrawals, invariant 8) are set
    aside here, as ``declared_holds`` sets aside the apps' hold sources.
    """
    own = [check for check in reconciliation._checks if check.run.__module__ == "apps.ledger.checks"]
    monkeypatch.setattr(reconciliation, "_checks", own)
