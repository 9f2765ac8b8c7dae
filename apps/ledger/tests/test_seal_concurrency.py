"""The sealer against real concurrent commits (real threads, each with its own connection)."""

import threading
from decimal import Decimal

import pytest
from django.db import connections, transaction

from apps.ledger.models import BlockEntry, EntryReason, JournalBlock
from apps.ledger.seal.services import journal_seal
from apps.ledger.services import credit, debit, entry_post, system_account, user_account
from apps.ledger.tests.factories import UserFactory, fund
from apps.ledger.tests.seal_helpers import verify_json
from apps.ledger.tests.threads import run_concurrently

pytestmark = pytest.mark.django_db(transaction=True)

ONE = Decimal(1)


def _post(user, asset, key: str):
    return entry_post(
        idempotency_key=key,
        reason=EntryReason.ADJUSTMENT,
        legs=[debit(system_account("equity", asset), ONE), credit(user_account(user.id, asset), ONE)],
    )


def test_an_entry_with_a_lower_id_that_commits_later_is_sealed_in_a_later_block(usdt, btc):
    """Ids are handed out at insert, commits come in any order: no id watermark may skip the slow one."""
    slow_user, fast_user = UserFactory(), UserFactory()
    inserted, release = threading.Event(), threading.Event()
    posted = {}

    def slow():
        try:
            with transaction.atomic():
                posted["slow"] = _post(slow_user, usdt, "slow").id
                inserted.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=slow)
    thread.start()
    assert inserted.wait(10)
    with transaction.atomic():
        fast_id = _post(fast_user, btc, "fast").id  # other accounts: no lock to wait for

    first = journal_seal()
    release.set()
    thread.join(10)
    second = journal_seal()

    assert posted["slow"] < fast_id
    assert [m.entry_id for m in BlockEntry.objects.filter(block=first[0])] == [fast_id]
    assert [m.entry_id for m in BlockEntry.objects.filter(block=second[0])] == [posted["slow"]]
    assert verify_json()[0] == 0


def test_sealers_running_at_once_seal_each_entry_exactly_once(usdt, settings):
    settings.LEDGER_SEAL_BATCH = 3
    user = UserFactory()
    for _ in range(10):
        fund(user, usdt, "1")

    results = run_concurrently([journal_seal for _ in range(4)])

    assert not [r for r in results if isinstance(r, Exception)]
    assert sorted(b.height for r in results for b in r) == list(range(JournalBlock.objects.count()))
    assert BlockEntry.objects.count() == 10
    code, result = verify_json()
    assert code == 0
    assert {name: result[name] for name in ("ok", "blocks", "entries", "head_height", "discrepancy")} == {
        "ok": True,
        "blocks": 4,
        "entries": 10,
        "head_height": 3,
        "discrepancy": None,
    }
