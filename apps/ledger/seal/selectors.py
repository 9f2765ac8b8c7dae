"""Reads behind the proof endpoints of PROOFS.md section 1: blocks, keys, an entry's inclusion proof."""

from apps.core.errors import InvalidState, NotFound, PermissionDenied

from ..merkle import audit_path
from ..models import BlockEntry, JournalBlock, JournalEntry, Posting
from .documents import block_header, entry_documents


def block_served(block: JournalBlock) -> dict:
    """``{"block": B, "block_hash", "signature", "key_id"}``."""
    return {
        "block": block_header(block),
        "block_hash": block.block_hash,
        "signature": block.signature,
        "key_id": block.key_id,
    }


def journal_head() -> JournalBlock:
    """The latest block; :class:`NotFound` while nothing is sealed."""
    block = JournalBlock.objects.order_by("-height").first()
    if block is None:
        raise NotFound("Nothing is sealed yet.")
    return block


def journal_block(height: int) -> JournalBlock:
    """The block at ``height``; :class:`NotFound` naming ``height`` otherwise."""
    block = JournalBlock.objects.filter(height=height).first()
    if block is None:
        raise NotFound(f"No block at height {height}.", fields={"height": "No such block."})
    return block


ENTRY_VIEW_PERMISSION = "ledger.view_journalentry"


def _entry_reader(user) -> tuple[bool, bool]:
    """``(staff holding ENTRY_VIEW_PERMISSION, session confirmed with the second factor)`` of a request's user."""
    is_verified = getattr(user, "is_verified", None)
    return bool(user.is_staff and user.has_perm(ENTRY_VIEW_PERMISSION)), bool(is_verified and is_verified())


def sees_every_entry(user) -> bool:
    """Whether ``user`` (a request's) may read any journal entry's proof, not only their own: staff with the
    permission :data:`ENTRY_VIEW_PERMISSION`, in a session confirmed with their second factor (django-otp's
    ``user.is_verified()``, which only a session's user has: never a user authenticated by an API key). A staff
    password alone, through the admin's log-in or a new API key, does not open every customer's entries (break-it
    review)."""
    permitted, verified = _entry_reader(user)
    return permitted and verified


def second_factor_missing(user) -> bool:
    """Whether ``user`` is staff with :data:`ENTRY_VIEW_PERMISSION` who would see every entry's proof
    (:func:`sees_every_entry`) but for a session confirmed with the second factor (an API key never is)."""
    permitted, verified = _entry_reader(user)
    return permitted and not verified


def entry_visible_to(entry_id: int, *, user_id: int, is_staff: bool) -> bool:
    """Whether the entry exists and the user may see it: ``is_staff`` (:func:`sees_every_entry`), or a posting of it
    is on one of the user's accounts."""
    if is_staff:
        return JournalEntry.objects.filter(id=entry_id).exists()
    return Posting.objects.filter(entry_id=entry_id, account__owner_id=user_id).exists()


def entry_proof(entry_id: int, *, user) -> dict:
    """The entry's inclusion proof: ``{"entry": E, "block": B, "block_hash", "signature", "key_id",
    "leaf_index", "tree_size", "audit_path": [hex, ...]}`` (RFC 6962 audit path, leaf to root).

    ``user`` is the request's: its owner sees its own entries, staff who may every one (:func:`sees_every_entry`).
    Raises :class:`NotFound` when the entry does not exist or the user may not see it (the
    same answer, so ids of others' entries leak nothing), :class:`PermissionDenied` for another customer's entry to
    staff who would see it with the second factor (:func:`second_factor_missing`; break-it review: told "No entry",
    an auditor took the entry for missing), :class:`InvalidState` while the entry is not sealed yet.
    """
    if not entry_visible_to(entry_id, user_id=user.id, is_staff=sees_every_entry(user)):
        if second_factor_missing(user) and JournalEntry.objects.filter(id=entry_id).exists():
            raise PermissionDenied(
                "Another customer's entry needs a back-office session confirmed with your second factor "
                "(log in at /admin/ and give its code), never an API key."
            )
        raise NotFound(f"No entry {entry_id}.", fields={"id": "No such entry."})
    member = BlockEntry.objects.filter(entry_id=entry_id).select_related("block").first()
    if member is None:
        raise InvalidState(f"Entry {entry_id} is not sealed yet; blocks are sealed every few seconds.")
    digests = [
        bytes.fromhex(digest)
        for digest in BlockEntry.objects.filter(block_id=member.block_id)
        .order_by("position")
        .values_list("digest", flat=True)
    ]
    return {
        "entry": entry_documents([entry_id])[entry_id],
        **block_served(member.block),
        "leaf_index": member.position,
        "tree_size": member.block.entry_count,
        "audit_path": [sibling.hex() for sibling in audit_path(digests, member.position)],
    }
