"""The entry document ``E`` and the block header ``B`` of PROOFS.md section 1, built from the rows."""

from ..amounts import format_as_stored
from ..canonical import canon_hash, proof_time
from ..db import PreparedCursor
from ..models import JournalBlock

DOCUMENT_VERSION = 1
GENESIS_PREVIOUS_HASH = "0" * 64

_ENTRY_ROWS = """
    SELECT e.id, e.idempotency_key, e.reason, e.reference_type, e.reference_id, e.created_at,
           p.id, p.account_id, s.code, s.decimals, p.amount, p.balance_after
    FROM ledger_journalentry e
    LEFT JOIN ledger_posting p ON p.entry_id = e.id
    LEFT JOIN ledger_asset s ON s.id = p.asset_id
    WHERE e.id = ANY(%s::bigint[])
    ORDER BY e.id, p.id
"""


def entry_documents(entry_ids: list[int]) -> dict[int, dict]:
    """``{entry id: E}`` for the entries that exist among ``entry_ids`` (postings in posting id order).

    Amounts are signed (debit positive) with exactly the asset's decimals. One finer than that (written past the
    ``entry_balanced`` trigger) keeps every digit (:func:`~apps.ledger.amounts.format_as_stored`): rounded, a change
    below the asset's smallest unit left the digest as sealed and ``journal_verify`` passed (break-it review); so
    the digest differs, and an outside verifier refuses the document for its decimals.
    """
    documents: dict[int, dict] = {}
    with PreparedCursor() as cursor:
        cursor.execute(_ENTRY_ROWS, [entry_ids])
        rows = cursor.fetchall()
    for entry_id, key, reason, reference_type, reference_id, created_at, *posting in rows:
        document = documents.get(entry_id)
        if document is None:
            document = documents[entry_id] = {
                "version": DOCUMENT_VERSION,
                "id": entry_id,
                "idempotency_key": key,
                "reason": reason,
                "reference_type": reference_type,
                "reference_id": reference_id,
                "created_at": proof_time(created_at),
                "postings": [],
            }
        posting_id, account_id, code, decimals, amount, balance_after = posting
        if posting_id is not None:
            document["postings"].append(
                {
                    "id": posting_id,
                    "account_id": account_id,
                    "asset": code,
                    "amount": format_as_stored(amount, decimals),
                    "balance_after": format_as_stored(balance_after, decimals),
                }
            )
    return documents


def entry_digest(document: dict) -> bytes:
    """``SHA256(canon(E))``: 32 bytes."""
    return canon_hash(document)


def block_header(block: JournalBlock) -> dict:
    """The header ``B`` of ``block`` (what its hash is taken over)."""
    return {
        "version": DOCUMENT_VERSION,
        "height": block.height,
        "previous_hash": block.previous_hash,
        "entries_root": block.entries_root,
        "entry_count": block.entry_count,
        "sealed_at": proof_time(block.sealed_at),
    }


def block_hash(block: JournalBlock) -> bytes:
    """``SHA256(canon(B))``: 32 bytes."""
    return canon_hash(block_header(block))
