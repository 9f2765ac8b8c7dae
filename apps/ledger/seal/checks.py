"""Invariant 9 of reconciliation: every entry older than a minute is sealed, and the chain verifies."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from ..reconciliation import ROW_LIMIT, Scope, query_rows, register_check
from .verification import journal_verify
from .witness import witness_problem


@register_check(invariant=9, name="journal_sealed")
def journal_sealed(scope: Scope) -> list[dict]:
    """The chain's problems, then the entries posted more than ``LEDGER_SEAL_GRACE`` seconds ago that are in no
    block (the report shows the first rows only, and deleted blocks leave every entry they held unsealed: a break-it
    review found a thousand "not sealed" rows hiding "blocks were deleted"). The chain's problems: the first block
    (and entry) where recomputing the digests, roots, chain links and signatures (pinned keys only) from the rows
    fails, each key in the database that is not pinned, each snapshot that does not verify or records a block hash
    the chain does not have, and a chain that lost or changed the block the sealer last witnessed outside the
    database (:mod:`apps.ledger.seal.witness`)."""
    cutoff = timezone.now() - timedelta(seconds=settings.LEDGER_SEAL_GRACE)
    problems: list[dict] = []
    result = journal_verify()
    if result.discrepancy:
        found = result.discrepancy
        problems.append({"block": found.height, "entry": found.entry, "problem": found.problem})
    problems.extend(result.key_problems)
    problems.extend(result.reference_problems)
    regressed = witness_problem(sealed_before=cutoff)  # a block sealed since this snapshot is not in it
    if regressed is not None:
        problems.append({"problem": regressed})
    problems += query_rows(
        """
        SELECT e.id AS entry, e.idempotency_key, e.created_at, 'not sealed' AS problem
        FROM ledger_journalentry e
        WHERE e.created_at < %s AND NOT EXISTS (SELECT 1 FROM ledger_blockentry b WHERE b.entry_id = e.id)
        ORDER BY e.id LIMIT %s
        """,
        [cutoff, ROW_LIMIT],
    )
    return problems
