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
