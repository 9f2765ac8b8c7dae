"""The snapshot header ``S`` of PROOFS.md section 2 from its row, and its hash."""

from apps.ledger.canonical import canon_hash, proof_time

from .models import LiabilitySnapshot

DOCUMENT_VERSION = 1


def snapshot_header(
    *,
    snapshot_id: int,
    block_height: int,
    block_hash: str,
    taken_at,
    assets: list[dict],
    leaf_count: int,
    root_hash: str,
    root_sums: list[str],
) -> dict:
    """``S``: amounts are strings with each asset's decimals, ``taken_at`` an aware datetime."""
    return {
        "version": DOCUMENT_VERSION,
        "snapshot_id": snapshot_id,
        "block_height": block_height,
        "block_hash": block_hash,
        "taken_at": proof_time(taken_at),
        "assets": assets,
        "leaf_count": leaf_count,
        "root_hash": root_hash,
        "root_sums": root_sums,
    }


def snapshot_header_of(snapshot: LiabilitySnapshot) -> dict:
    """``S`` of a stored snapshot."""
    return snapshot_header(
        snapshot_id=snapshot.id,
        block_height=snapshot.block_id,
        block_hash=snapshot.block_hash,
        taken_at=snapshot.taken_at,
        assets=snapshot.assets,
        leaf_count=snapshot.leaf_count,
        root_hash=snapshot.root_hash,
        root_sums=snapshot.root_sums,
    )


def snapshot_hash(header: dict) -> bytes:
    """``SHA256(canon(S))``."""
    return canon_hash(header)


def snapshot_served(snapshot: LiabilitySnapshot) -> dict:
    """``{"snapshot": S, "snapshot_hash", "signature", "key_id"}``."""
    return {
        "snapshot": snapshot_header_of(snapshot),
        "snapshot_hash": snapshot.snapshot_hash,
        "signature": snapshot.signature,
        "key_id": snapshot.key_id,
    }
