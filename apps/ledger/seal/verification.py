"""Verification of the sealed journal from the rows alone: every digest, root, chain link and signature.

:func:`journal_verify` walks the blocks from a height up and stops at the first block that
does not verify, naming it and, where one is to blame, the entry.

Signatures are checked against the keys pinned by the settings (:func:`.keys.pinned_public_keys`),
never against the key table alone: someone who can write to the database could add a key of their
own there and re-sign a rewritten chain with it. Records of other apps that name a block by its hash
(liabilities snapshots) are registered with :func:`register_signed_references` and checked against
the recomputed chain, so a history rewritten below a snapshot is caught too.
"""

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from ..merkle import tree_hash
from ..models import BlockEntry, JournalBlock, SigningKey
from ..signing import key_id_for, signature_valid
from .documents import GENESIS_PREVIOUS_HASH, block_hash, entry_digest, entry_documents
from .keys import pinned_public_keys

NOT_PINNED = "not pinned (neither LEDGER_SIGNING_KEY's public key nor in LEDGER_TRUSTED_PUBLIC_KEYS)"


@dataclass(frozen=True)
class Discrepancy:
    """The first thing that does not verify: the block's ``height``, the ``entry`` id if one is to blame."""

    height: int
    entry: int | None
    problem: str


@dataclass(frozen=True)
class SignedReference:
    """A signed record outside the journal that names one of its blocks (a liabilities snapshot).

    ``name`` identifies it in reports (``"snapshot 3"``); ``height`` and ``block_hash`` are the block
    it records; ``digest`` is the hash of its document recomputed from its row, ``recorded_hash``,
    ``signature`` and ``key_id`` what is stored (and published) with it.
    """

    name: str
    height: int
    block_hash: str
    digest: bytes
    recorded_hash: str
    signature: str
    key_id: str


ReferenceSource = Callable[[], Iterable[SignedReference]]
_reference_sources: list[ReferenceSource] = []


def register_signed_references(source: ReferenceSource) -> ReferenceSource:
    """Register ``source() -> [SignedReference, ...]`` (from an ``AppConfig.ready``): :func:`journal_verify`
    checks each reference's hash, signature (pinned keys only) and block hash against the chain."""
    if source not in _reference_sources:
        _reference_sources.append(source)
    return source


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of :func:`journal_verify`: ``ok`` when ``discrepancy`` is ``None`` and nothing else failed.

    ``discrepancy`` is the first block (and entry) that does not verify. ``key_problems`` names
    each row of the key table that is not pinned; ``reference_problems`` each signed reference
    (snapshot) that does not verify or records a block hash the chain does not have;
    ``references`` counts the references checked; ``pinned_keys`` the key ids trusted.
    """

    blocks: int
    entries: int
    head_height: int | None
    discrepancy: Discrepancy | None
    key_problems: tuple[dict, ...] = ()
    reference_problems: tuple[dict, ...] = ()
    references: int = 0
    pinned_keys: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.discrepancy is None and not self.key_problems and not self.reference_problems

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "blocks": self.blocks,
            "entries": self.entries,
            "head_height": self.head_height,
            "discrepancy": asdict(self.discrepancy) if self.discrepancy else None,
            "pinned_keys": list(self.pinned_keys),
            "key_problems": list(self.key_problems),
            "references": self.references,
            "reference_problems": list(self.reference_problems),
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


def _block_discrepancy(block: JournalBlock, previous_hash: str, pinned: dict[str, str]) -> Discrepancy | None:
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
    problem = header_problem(block, pinned)
    return None if problem is None else Discrepancy(block.height, None, problem)


def header_problem(block: JournalBlock, pinned: dict[str, str]) -> str | None:
    """Why ``block``'s header does not verify on its own (its hash recomputed from the header, then its signature
    by a key of ``pinned``, ``{key_id: public key hex}``), or ``None``. Its entries and link are not read."""
    digest = block_hash(block)
    if digest.hex() != block.block_hash:
        return "block_hash does not match the header"
    public_key = pinned.get(block.key_id)
    if public_key is None:
        return f"the block is signed by key {block.key_id}, which is {NOT_PINNED}"
    if not signature_valid(public_key, digest, block.signature):
        return f"the signature does not verify with key {block.key_id}"
    return None


def _key_problems(pinned: dict[str, str]) -> list[dict]:
    """Rows of the key table (what the keys endpoint publishes) that are not pinned, or whose ``key_id`` is not
    derived from their public key."""
    problems = []
    trusted = set(pinned.values())
    for row in SigningKey.objects.order_by("created_at", "key_id"):
        if not _is_hex(row.public_key) or key_id_for(row.public_key) != row.key_id:
            problem = "key_id is not the first 16 hex characters of SHA256(public key)"
        elif row.public_key not in trusted:
            problem = f"public key {NOT_PINNED}"
        else:
            continue
        problems.append({"key_id": row.key_id, "public_key": row.public_key, "problem": problem})
    return problems


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True


def _reference_problem(reference: SignedReference, pinned: dict[str, str]) -> str | None:
    """What is wrong with a reference's own hash and signature, if anything (its block is checked in the walk)."""
    if reference.digest.hex() != reference.recorded_hash:
        return "its hash does not match its document"
    public_key = pinned.get(reference.key_id)
    if public_key is None:
        return f"it is signed by key {reference.key_id}, which is {NOT_PINNED}"
    if not signature_valid(public_key, reference.digest, reference.signature):
        return f"the signature does not verify with key {reference.key_id}"
    return None


def _reference_block_problem(reference: SignedReference, chain_hash: str) -> dict | None:
    if reference.block_hash == chain_hash:
        return None
    return {
        "reference": reference.name,
        "height": reference.height,
        "problem": f"it records block hash {reference.block_hash}, the chain's block {reference.height} has {chain_hash}",
    }


def journal_verify(*, from_height: int = 0) -> VerifyResult:
    """Recompute every entry digest, entries root, block hash, chain link and signature from ``from_height`` up,
    and check the key table and the registered signed references (snapshots) against the pinned keys.

    Heights must follow each other from 0 with no gap; the first block checked is chained
    to the recomputed hash of the block below it. Each block's signature must verify with a
    pinned key (:func:`.keys.pinned_public_keys`). A reference at a height from ``from_height``
    up must record the hash of the chain's block at that height (references below it are
    checked for their own hash and signature only). Returns a :class:`VerifyResult` naming
    the first discrepancy and every key and reference problem (no exception for tampering; the
    caller decides). Raises ``ImproperlyConfigured`` for unreadable pinned keys.
    """
    pinned = pinned_public_keys()
    key_problems = tuple(_key_problems(pinned))
    reference_problems: list[dict] = []
    by_height: dict[int, list[SignedReference]] = defaultdict(list)
    references = 0
    for source in _reference_sources:
        for reference in source():
            references += 1
            problem = _reference_problem(reference, pinned)
            if problem:
                reference_problems.append({"reference": reference.name, "height": reference.height, "problem": problem})
            if reference.height >= from_height:
                by_height[reference.height].append(reference)

    def result(blocks: int, entries: int, head: int | None, discrepancy: Discrepancy | None) -> VerifyResult:
        return VerifyResult(
            blocks,
            entries,
            head,
            discrepancy,
            key_problems=key_problems,
            reference_problems=tuple(reference_problems),
            references=references,
            pinned_keys=tuple(sorted(pinned)),
        )

    previous_hash = GENESIS_PREVIOUS_HASH
    if from_height > 0:
        below = JournalBlock.objects.filter(height=from_height - 1).first()
        if below is None:
            return result(0, 0, None, Discrepancy(from_height - 1, None, f"block {from_height - 1} is missing"))
        previous_hash = block_hash(below).hex()
    expected, blocks, entries = from_height, 0, 0
    head = None
    blocks_from = JournalBlock.objects.filter(height__gte=from_height).order_by("height")
    for block in blocks_from.iterator(chunk_size=200):
        if block.height != expected:
            return result(blocks, entries, head, Discrepancy(expected, None, f"block {expected} is missing"))
        found = _block_discrepancy(block, previous_hash, pinned)
        if found:
            return result(blocks, entries, head, found)
        for reference in by_height.pop(block.height, []):
            mismatch = _reference_block_problem(reference, block.block_hash)
            if mismatch:
                reference_problems.append(mismatch)
        previous_hash = block.block_hash
        expected, blocks, entries, head = block.height + 1, blocks + 1, entries + block.entry_count, block.height
    for height, left in sorted(by_height.items()):
        reference_problems.extend(
            {"reference": reference.name, "height": height, "problem": f"block {height} is not in the chain"}
            for reference in left
        )
    return result(blocks, entries, head, None)
