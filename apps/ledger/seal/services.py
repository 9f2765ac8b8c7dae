"""The sealer: seals every committed, unsealed journal entry into the next signed block.

One sealer runs at a time: each block is written in a transaction that first takes a
PostgreSQL advisory lock, so a second sealer waits and then finds only what is left.
Posting takes no part in it (no lock, no chain head on the posting path): entries become
sealable when their transaction commits. An entry with a lower id can commit after one
with a higher id, so unsealed entries are found by their absence from block membership
(``BlockEntry.entry`` is unique: each entry in exactly one block), never by an id
watermark.
"""

import logging

from django.conf import settings
from django.db import connection
from django.utils import timezone

from ..errors import SealRefused
from ..merkle import tree_hash
from ..models import BlockEntry, JournalBlock
from ..signing import sign
from ..transactions import retrying_atomic
from .documents import GENESIS_PREVIOUS_HASH, block_hash, entry_digest, entry_documents
from .keys import pinned_public_keys, signing_key_active
from .verification import header_problem
from .witness import witness_check, witness_record_on_commit

log = logging.getLogger(__name__)

# pg_advisory_xact_lock key of the sealer ("seal" in ASCII).
SEAL_LOCK_KEY = 0x7365616C

_UNSEALED = """
    SELECT e.id FROM ledger_journalentry e
    WHERE NOT EXISTS (SELECT 1 FROM ledger_blockentry b WHERE b.entry_id = e.id)
    ORDER BY e.id LIMIT %s
"""


def journal_seal(*, max_blocks: int | None = None) -> list[JournalBlock]:
    """Seal every entry committed and not yet in a block; return the new blocks (oldest first).

    Each block holds at most ``settings.LEDGER_SEAL_BATCH`` entries, in id order, and is
    committed on its own; nothing is sealed when nothing is waiting (no empty blocks).
    ``max_blocks`` stops after that many blocks. Raises ``ImproperlyConfigured`` without
    a signing key, and :class:`~apps.ledger.errors.SealRefused` (sealing nothing) when the chain no longer holds the
    head the sealer last witnessed (:mod:`apps.ledger.seal.witness`) or its newest block does not verify (a block
    forged into the database: the real key would vouch for it by signing the next one).
    """
    blocks: list[JournalBlock] = []
    while max_blocks is None or len(blocks) < max_blocks:
        block = _block_seal()
        if block is None:
            break
        blocks.append(block)
    return blocks


@retrying_atomic
def _block_seal() -> JournalBlock | None:
    """Seal the next block of up to ``LEDGER_SEAL_BATCH`` unsealed entries under the sealer's lock."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SEAL_LOCK_KEY])
        # After the lock: this statement's snapshot sees every block a previous sealer committed.
        cursor.execute(_UNSEALED, [settings.LEDGER_SEAL_BATCH])
        entry_ids = [row[0] for row in cursor.fetchall()]
    if not entry_ids:
        return None
    witness_check()  # never build on a chain shorter than, or different from, one already signed
    documents = entry_documents(entry_ids)
    digests = [entry_digest(documents[entry_id]) for entry_id in entry_ids]
    previous = JournalBlock.objects.order_by("-height").first()
    if previous is not None and (problem := header_problem(previous, pinned_public_keys())) is not None:
        log.error("ledger.journal_head_unverified", extra={"height": previous.height, "problem": problem})
        raise SealRefused(f"Refusing to seal on block {previous.height}: {problem}.")
    key = signing_key_active()
    block = JournalBlock(
        height=0 if previous is None else previous.height + 1,
        previous_hash=GENESIS_PREVIOUS_HASH if previous is None else previous.block_hash,
        entries_root=tree_hash(digests).hex(),
        entry_count=len(entry_ids),
        sealed_at=timezone.now(),
        key=key.row,
    )
    digest = block_hash(block)
    block.block_hash = digest.hex()
    block.signature = sign(key.private_key, digest)
    block.save(force_insert=True)
    BlockEntry.objects.bulk_create(
        [
            BlockEntry(block=block, entry_id=entry_id, position=position, digest=digests[position].hex())
            for position, entry_id in enumerate(entry_ids)
        ]
    )
    witness_record_on_commit(block)
    return block
