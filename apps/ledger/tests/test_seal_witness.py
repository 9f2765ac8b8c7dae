"""The chain head's witness outside the database (:mod:`apps.ledger.seal.witness`): found by a break-it review, someone
with database rights deleted the newest blocks, rewrote an entry they held, and the live sealer sealed it again
with the real key; journal_verify, reconcile and the verifiers all passed."""

import pytest
from django.core.management import CommandError

from apps.ledger.errors import SealRefused
from apps.ledger.models import BlockEntry, JournalBlock
from apps.ledger.reconciliation import reconcile
from apps.ledger.seal import witness
from apps.ledger.seal.keys import signing_key_active
from apps.ledger.seal.services import journal_seal
from apps.ledger.seal.witness import witness_accept, witness_read, witness_record_on_commit
from apps.ledger.tests.factories import fund
from apps.ledger.tests.seal_helpers import (
    as_superuser_without_triggers,
    chain_rewrite,
    entry_amounts_shifted,
    run_command,
    verify_json,
)


@pytest.fixture
def witnessed(db, settings):
    """The witness on, starting empty (the chain is), and emptied afterwards: Redis outlives the test's rollback."""
    settings.LEDGER_SEAL_HEAD_WITNESS = True
    witness_accept()
    yield
    witness._client().delete(witness._key())


def _seal(capture) -> list[JournalBlock]:
    with capture(execute=True):  # the witness is recorded once the block's transaction commits
        return journal_seal()


def _two_blocks(capture, usdt, user) -> list[JournalBlock]:
    fund(user, usdt, "10")
    first = _seal(capture)
    fund(user, usdt, "20")
    return first + _seal(capture)


def _journal_sealed_problems() -> list[str]:
    check = next(c for c in reconcile().checks if c.name == "journal_sealed")
    return [row["problem"] for row in check.details]


def test_each_sealed_block_is_witnessed(witnessed, usdt, user, django_capture_on_commit_callbacks):
    blocks = _two_blocks(django_capture_on_commit_callbacks, usdt, user)

    assert witness_read() == (1, blocks[1].block_hash)
    assert _journal_sealed_problems() == []


def test_deleted_top_blocks_stop_the_sealer_and_fail_reconcile(
    witnessed, usdt, user, django_capture_on_commit_callbacks
):
    blocks = _two_blocks(django_capture_on_commit_callbacks, usdt, user)
    as_superuser_without_triggers(
        ("DELETE FROM ledger_blockentry WHERE block_id = 1", []),
        ("DELETE FROM ledger_journalblock WHERE height = 1", []),
    )
    problem = f"the chain has no block 1, which was sealed with hash {blocks[1].block_hash}: blocks were deleted"

    assert verify_json()[0] == 0  # what is left of the chain verifies: only the witness knows
    with pytest.raises(SealRefused, match="Refusing to seal: the chain has no block 1"):
        _seal(django_capture_on_commit_callbacks)
    assert not JournalBlock.objects.filter(height=1).exists()
    assert _journal_sealed_problems() == [problem]
    with pytest.raises(CommandError, match="Refusing to seal: the chain has no block 1"):
        run_command("journal_seal")  # manage.py prints the message and exits 1

    assert run_command("journal_head_accept") == (
        0,
        f"was: {problem}\naccepted: block 0, hash {blocks[0].block_hash}\n",
    )
    resealed = _seal(django_capture_on_commit_callbacks)
    assert [block.height for block in resealed] == [1]
    assert witness_read() == (1, resealed[0].block_hash)


def test_a_chain_rewritten_and_re_signed_with_the_real_key_fails_reconcile(
    witnessed, usdt, user, django_capture_on_commit_callbacks
):
    blocks = _two_blocks(django_capture_on_commit_callbacks, usdt, user)
    victim = BlockEntry.objects.get(block_id=1, position=0).entry_id
    entry_amounts_shifted(victim)
    chain_rewrite(signing_key_active().private_key)
    rewritten = JournalBlock.objects.get(height=1).block_hash

    assert verify_json()[0] == 0
    assert _journal_sealed_problems() == [
        f"block 1 is not the block sealed there (hash {blocks[1].block_hash}, now {rewritten}): it was rewritten"
    ]


def test_the_witness_only_moves_forward(witnessed, usdt, user, django_capture_on_commit_callbacks):
    blocks = _two_blocks(django_capture_on_commit_callbacks, usdt, user)
    with django_capture_on_commit_callbacks(execute=True):
        witness_record_on_commit(blocks[0])  # a sealer's late report of an older block

    assert witness_read() == (1, blocks[1].block_hash)


def test_off_it_records_and_checks_nothing(witnessed, settings, usdt, user, django_capture_on_commit_callbacks):
    settings.LEDGER_SEAL_HEAD_WITNESS = False
    _two_blocks(django_capture_on_commit_callbacks, usdt, user)
    settings.LEDGER_SEAL_HEAD_WITNESS = True

    assert witness_read() is None
