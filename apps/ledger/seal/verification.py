"""Verification of the sealed journal from the rows alone: every digest, root, chain link and signature.

:func:`journal_verify` walks the blocks from a height up and stops at the first block that
does not verify, naming it and, where one is to blame, the entry.
"""

from dataclasses import asdict, dataclass

from ..merkle import tree_hash
from ..models import BlockEntry, JournalBlock
from ..signing import signature_valid
from .documents import GENESIS_PREVIOUS_HASH, block_hash, entry_digest, entry_documents


@dataclass(frozen=True)
class Discrepancy:
    """The first thing that does not verify: the block's ``height``, the ``entry`` id if one is to blame."""

    height: int
    entry: int | None
    problem: str


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of :func:`journal_verify`: ``ok`` when ``discrepancy`` is ``None``."""

    blocks: int
    entries: int
    head_height: int | None
    discrepancy: Discrepancy | None

    @property
    def ok(self) -> bool:
        return self.discrepancy is None

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "blocks": self.blocks,
            "entries": self.entries,
            "head_height": self.head_height,
            "discrepancy": asdict(self.discrepancy) if self.discrepancy else None,
        }


def _membership_discrepancy(block: JournalBlock, members: list[BlockEntry]) -> Discrepancy | None:
    """Positions 0..n-1 with n the header's ``entry_count``, entry ids rising."""
    for index, member in enumerate(members):
        if member.position != index or index >= block.entry_count:
            return Discrepancy(
                block.height,
                member.entry_id,
                f"entry {member.entry_id} sits at position {member.position} of a block sealed with "
                f"{block.entry_count} entries",
            )
        if index and member.entry_id <= members[index - 1].entry_id:
            return Discrepancy(block.height, member.entry_id, f"entry {member.entry_id} is out of id order")
    if len(members) != block.entry_count:
        return Discrepancy(
            block.height, None, f"the block holds {len(members)} entries, its header says {block.entry_count}"
        )
    return None


def _block_discrepancy(block: JournalBlock, previous_hash: str) -> Discrepancy | None:
    if block.previous_hash != previous_hash:
        return Discrepancy(block.height, None, "previous_hash does not match the hash of the block before")
    members = list(BlockEntry.objects.filter(block=block).order_by("position", "entry_id"))
    found = _membership_discrepancy(block, members)
    if found:
        return found
    documents = entry_documents([member.entry_id for member in members])
    digests = []
    for member in members:
        document = documents.get(member.entry_id)
        if document is None:
            return Discrepancy(block.height, member.entry_id, f"entry {member.entry_id} is missing")
        digest = entry_digest(document)
        if digest.hex() != member.digest:
            return Discrepancy(
                block.height, member.entry_id, f"entry {member.entry_id} differs from the digest it was sealed with"
            )
        digests.append(digest)
    if tree_hash(digests).hex() != block.entries_root:
        return Discrepancy(block.height, None, "entries_root does not match the block's entries")
    digest = block_hash(block)
    if digest.hex() != block.block_hash:
        return Discrepancy(block.height, None, "block_hash does not match the header")
    if not signature_valid(block.key.public_key, digest, block.signature):
        return Discrepancy(block.height, None, f"the signature does not verify with key {block.key_id}")
    return None


def journal_verify(*, from_height: int = 0) -> VerifyResult:
    """Recompute every entry digest, entries root, block hash, chain link and signature from ``from_height`` up.

    Heights must follow each other from 0 with no gap; the first block checked is chained
    to the recomputed hash of the block below it. Returns a :class:`VerifyResult` naming
    the first discrepancy (no exception for tampering; the caller decides).
    """
    previous_hash = GENESIS_PREVIOUS_HASH
    if from_height > 0:
        below = JournalBlock.objects.filter(height=from_height - 1).first()
        if below is None:
            return VerifyResult(0, 0, None, Discrepancy(from_height - 1, None, f"block {from_height - 1} is missing"))
        previous_hash = block_hash(below).hex()
    expected, blocks, entries = from_height, 0, 0
    head = None
    blocks_from = JournalBlock.objects.filter(height__gte=from_height).select_related("key").order_by("height")
    for block in blocks_from.iterator(chunk_size=200):
        if block.height != expected:
            return VerifyResult(blocks, entries, head, Discrepancy(expected, None, f"block {expected} is missing"))
        found = _block_discrepancy(block, previous_hash)
        if found:
            return VerifyResult(blocks, entries, head, found)
        previous_hash = block.block_hash
        expected, blocks, entries, head = block.height + 1, blocks + 1, entries + block.entry_count, block.height
    return VerifyResult(blocks, entries, head, None)
