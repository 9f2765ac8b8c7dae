"""The chain head's witness outside the database (:mod:`apps.ledger.seal.witness`): found by a break-it review, someone
with database rights deleted the newest blocks, rewrote an entry they held, and the live sealer sealed it again
with the real key; journal_verify, reconcile and the verifiers all passed."""

import re
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from apps.audit.models import AuditLogEntry
from apps.ledger.errors import SealRefused
from apps.ledger.models import BlockEntry, JournalBlock
from apps.ledger.reconciliation import reconcile
from apps.ledger.seal import witness
from apps.ledger.seal.health import journal_health
from apps.ledger.seal.keys import signing_key_active
from apps.ledger.seal.services import journal_seal
from apps.ledger.seal.witness import witness_accept, witness_read, witness_record_on_commit
from apps.ledger.tests.factories import UserFactory, fund
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

    head = witness_read()
    assert (head.height, head.block_hash) == (1, blocks[1].block_hash)
    assert abs(head.sealed_at - blocks[1].sealed_at) < timedelta(milliseconds=1)
    assert _journal_sealed_problems() == []


def test_deleted_top_blocks_stop_the_sealer_and_fail_reconcile(
    witnessed, usdt, user, settings, django_capture_on_commit_callbacks
):
    settings.LEDGER_SEAL_GRACE = 0  # reconcile counts a missing block sealed before its snapshot, less the grace
    blocks = _two_blocks(django_capture_on_commit_callbacks, usdt, user)
    as_superuser_without_triggers(
        ("DELETE FROM ledger_blockentry WHERE block_id = 1", []),
        ("DELETE FROM ledger_journalblock WHERE height = 1", []),
    )
    problem = f"the chain has no block 1, which was sealed with hash {blocks[1].block_hash}: blocks were deleted"

    code, verified = verify_json()  # what is left of the chain verifies: only the witness knows
    assert (code, verified["ok"], verified["discrepancy"], verified["head_problem"]) == (1, False, None, problem)
    assert run_command("journal_verify")[1].endswith(f"FAIL head: {problem}\n")  # break-it review: it said "ok"
    with pytest.raises(SealRefused, match="Refusing to seal: the chain has no block 1"):
        _seal(django_capture_on_commit_callbacks)
    assert not JournalBlock.objects.filter(height=1).exists()
    assert _journal_sealed_problems() == [problem, "not sealed"]  # the block first (the report shows the first rows)
    with pytest.raises(CommandError, match="Refusing to seal: the chain has no block 1"):
        run_command("journal_seal")  # manage.py prints the message and exits 1

    operator = UserFactory(is_staff=True)
    accept = ["--operator", operator.username, "--reason", "restored from the 02:00 backup (ticket 7)"]
    assert run_command("journal_head_accept", *accept) == (
        0,
        f"was: {problem}\naccepted: block 0, hash {blocks[0].block_hash}\n",
    )
    recorded = AuditLogEntry.objects.get(action="journal.head_accept")  # break-it review: it left only a log line
    assert (recorded.actor_id, recorded.object_type, recorded.object_id) == (operator.pk, "journal", "0")
    assert recorded.before == {"problem": problem}
    assert recorded.after == {
        "head": {"height": 0, "hash": blocks[0].block_hash},
        "reason": "restored from the 02:00 backup (ticket 7)",
    }
    resealed = _seal(django_capture_on_commit_callbacks)
    assert [block.height for block in resealed] == [1]
    assert witness_read().block_hash == resealed[0].block_hash


@pytest.mark.parametrize(
    "overrides, refusal",
    [
        ({"--reason": " "}, "--reason: A reason is required."),
        ({"--reason": "ok\u202e"}, "--reason: Control and invisible formatting characters are not allowed."),
        ({"--operator": "customer"}, "--operator: no active staff user 'customer'."),
    ],
)
def test_accepting_the_head_needs_a_staff_operator_and_a_reason(
    witnessed, usdt, user, django_capture_on_commit_callbacks, overrides, refusal
):
    blocks = _two_blocks(django_capture_on_commit_callbacks, usdt, user)
    operator, _ = UserFactory(is_staff=True), UserFactory(username="customer")
    given = {"--operator": operator.username, "--reason": "restored", **overrides}

    with pytest.raises(CommandError, match=re.escape(refusal)) as refused:
        call_command("journal_head_accept", *[word for pair in given.items() for word in pair])

    assert refused.value.returncode == 2
    assert not AuditLogEntry.objects.exists()
    assert witness_read().block_hash == blocks[1].block_hash


def test_a_chain_rewritten_and_re_signed_with_the_real_key_fails_reconcile(
    witnessed, usdt, user, django_capture_on_commit_callbacks
):
    blocks = _two_blocks(django_capture_on_commit_callbacks, usdt, user)
    victim = BlockEntry.objects.get(block_id=1, position=0).entry_id
    entry_amounts_shifted(victim)
    chain_rewrite(signing_key_active().private_key)
    rewritten = JournalBlock.objects.get(height=1).block_hash

    problem = f"block 1 is not the block sealed there (hash {blocks[1].block_hash}, now {rewritten}): it was rewritten"
    code, verified = verify_json()  # every block verifies with the real key: only the witness knows
    assert (code, verified["discrepancy"], verified["head_problem"]) == (1, None, problem)
    assert _journal_sealed_problems() == [problem]


def test_the_witness_only_moves_forward(witnessed, usdt, user, django_capture_on_commit_callbacks):
    blocks = _two_blocks(django_capture_on_commit_callbacks, usdt, user)
    with django_capture_on_commit_callbacks(execute=True):
        witness_record_on_commit(blocks[0])  # a sealer's late report of an older block

    assert witness_read().block_hash == blocks[1].block_hash


def test_reconcile_does_not_count_a_block_sealed_after_its_snapshot(
    witnessed, usdt, user, django_capture_on_commit_callbacks
):
    """Found by a break-it review: reconcile's snapshot is taken before it reads the witness, so a block the live
    sealer committed and recorded in between was "deleted" (a false alarm in 30 to 40 % of runs on a busy chain).
    A witnessed block missing from the snapshot counts only when sealed before it (less the seal grace)."""
    blocks = _two_blocks(django_capture_on_commit_callbacks, usdt, user)
    just_sealed = JournalBlock(height=2, block_hash="ab" * 32, sealed_at=timezone.now())  # committed elsewhere
    with django_capture_on_commit_callbacks(execute=True):
        witness_record_on_commit(just_sealed)

    assert _journal_sealed_problems() == []  # LEDGER_SEAL_GRACE: an hour in the test settings

    long_ago = JournalBlock(height=3, block_hash="cd" * 32, sealed_at=blocks[1].sealed_at - timedelta(hours=2))
    with django_capture_on_commit_callbacks(execute=True):
        witness_record_on_commit(long_ago)
    assert _journal_sealed_problems() == [
        f"the chain has no block 3, which was sealed with hash {'cd' * 32}: blocks were deleted"
    ]


def test_verify_says_whether_it_compared_the_witnessed_head(witnessed, usdt, user, django_capture_on_commit_callbacks):
    """Break-it review: with Redis out of reach, journal_verify said "ok" (exit 0, ``head_problem`` null) and only a
    log line on stderr told that the head was never compared."""
    _two_blocks(django_capture_on_commit_callbacks, usdt, user)
    assert verify_json()[1]["head_witness"] == "checked"

    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):  # nothing listens there
        code, verified = verify_json()
        text = run_command("journal_verify")[1]

    assert (code, verified["ok"], verified["head_problem"], verified["head_witness"]) == (0, True, None, "unchecked")
    assert text.rstrip().endswith("; head witness NOT checked (Redis could not be reached)")


def test_off_it_records_and_checks_nothing(witnessed, settings, usdt, user, django_capture_on_commit_callbacks):
    settings.LEDGER_SEAL_HEAD_WITNESS = False
    _two_blocks(django_capture_on_commit_callbacks, usdt, user)
    settings.LEDGER_SEAL_HEAD_WITNESS = True

    assert witness_read() is None


def test_a_search_path_that_shadows_the_catalog_does_not_move_the_witness(
    witnessed, usdt, user, django_capture_on_commit_callbacks
):
    """Found by a break-it review: with ``ALTER DATABASE ... SET search_path = public, pg_catalog`` and a
    ``public.pg_control_system()`` of theirs, a superuser moved the witness to a key with nothing recorded, then
    deleted blocks that the live sealer sealed again, unnoticed."""
    blocks = _two_blocks(django_capture_on_commit_callbacks, usdt, user)
    with connection.cursor() as cursor:  # all undone by the test's rollback
        cursor.execute("CREATE SCHEMA shadow")
        cursor.execute(
            "CREATE FUNCTION shadow.pg_control_system(OUT system_identifier bigint, OUT pg_control_version int)"
            " LANGUAGE sql AS 'SELECT 1::bigint, 1'"
        )
        cursor.execute("SET LOCAL search_path = shadow, public, pg_catalog")

        assert witness_read().block_hash == blocks[1].block_hash
        cursor.execute("SELECT (pg_control_system()).system_identifier")  # the shadow answers unqualified names
        assert cursor.fetchone() == (1,)


def test_health_reports_deleted_blocks_at_once_and_entries_the_sealer_left(
    witnessed, usdt, user, settings, django_capture_on_commit_callbacks
):
    blocks = _two_blocks(django_capture_on_commit_callbacks, usdt, user)
    assert journal_health() == "ok"
    fund(user, usdt, "30")  # not sealed yet
    assert journal_health() == "ok"  # within LEDGER_SEAL_GRACE
    settings.LEDGER_SEAL_GRACE = 0
    assert re.fullmatch(r"entries unsealed for \d+ s", journal_health())

    as_superuser_without_triggers(
        ("DELETE FROM ledger_blockentry WHERE block_id = 1", []),
        ("DELETE FROM ledger_journalblock WHERE height = 1", []),
    )
    assert journal_health() == (
        f"the chain has no block 1, which was sealed with hash {blocks[1].block_hash}: blocks were deleted"
    )
