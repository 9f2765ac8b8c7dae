"""Reads of liabilities snapshots: the published list, a user's proof, the solvency figures."""

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Q

from apps.core.errors import NotFound
from apps.ledger.seal.verification import SignedReference

from .documents import snapshot_hash, snapshot_header_of, snapshot_served
from .models import LiabilityLeaf, LiabilityNode, LiabilitySnapshot
from .sumtree import format_units, path_steps


def snapshots_published(*, limit: int = 100) -> list[LiabilitySnapshot]:
    """The newest ``limit`` snapshots, newest first."""
    return list(LiabilitySnapshot.objects.order_by("-id")[:limit])


def snapshots_of_user(*, user_id: int, limit: int = 30) -> list[LiabilitySnapshot]:
    """The newest ``limit`` snapshots holding a leaf of the user (their balances were in them), newest first."""
    ids = LiabilityLeaf.objects.filter(user_id=user_id).values("snapshot_id")
    return list(LiabilitySnapshot.objects.filter(id__in=ids).order_by("-id")[:limit])


def snapshot_latest() -> LiabilitySnapshot | None:
    """The newest snapshot, if any."""
    return LiabilitySnapshot.objects.order_by("-id").first()


def snapshot_references() -> Iterator[SignedReference]:
    """Every snapshot as the block it records and its signed hash, for ``journal_verify`` to check against the
    recomputed chain and the pinned keys (oldest first)."""
    for snapshot in LiabilitySnapshot.objects.order_by("id").iterator(chunk_size=500):
        yield SignedReference(
            name=f"snapshot {snapshot.id}",
            height=snapshot.block_id,
            block_hash=snapshot.block_hash,
            digest=snapshot_hash(snapshot_header_of(snapshot)),
            recorded_hash=snapshot.snapshot_hash,
            signature=snapshot.signature,
            key_id=snapshot.key_id,
        )


def _sums(encoded: bytes, assets: list[dict]) -> list[str]:
    """u128 sums back to amount strings in the snapshot's asset order."""
    return [
        format_units(int.from_bytes(encoded[16 * i : 16 * i + 16], "big"), asset["decimals"])
        for i, asset in enumerate(assets)
    ]


def liabilities_proof(user_id: int, *, snapshot_id: int | None = None) -> dict:
    """The user's proof in snapshot ``snapshot_id``, by default the newest (PROOFS.md section 2):
    ``{"snapshot": S, "snapshot_hash", "signature", "key_id", "user_id", "nonce", "balances", "path"}``. Every snapshot
    keeps its tree, so a customer can check any of them, not only the one published last.

    Raises :class:`NotFound` when there is no such snapshot (none yet, for the newest) or the user had nothing in it.
    """
    if snapshot_id is None:
        snapshot = snapshot_latest()
        if snapshot is None:
            raise NotFound("No liabilities snapshot has been taken yet.")
    else:
        snapshot = LiabilitySnapshot.objects.filter(id=snapshot_id).first()
        if snapshot is None:
            raise NotFound("No such liabilities snapshot.", fields={"snapshot_id": "No such liabilities snapshot."})
    leaf = LiabilityLeaf.objects.filter(snapshot=snapshot, user_id=user_id).first()
    if leaf is None:
        which = "the latest liabilities snapshot" if snapshot_id is None else f"liabilities snapshot {snapshot.id}"
        raise NotFound(f"You had no balance in {which}, so it holds no leaf of yours.")
    steps = path_steps(leaf.position, snapshot.leaf_count)
    wanted = Q(level=0, position=leaf.position)
    for level, position, _ in steps:
        wanted |= Q(level=level, position=position)
    nodes = {(node.level, node.position): node for node in LiabilityNode.objects.filter(wanted, snapshot=snapshot)}
    return {
        **snapshot_served(snapshot),
        "user_id": user_id,
        "nonce": bytes(leaf.nonce).hex(),
        "balances": _sums(bytes(nodes[0, leaf.position].sums), snapshot.assets),
        "path": [
            {
                "side": side,
                "hash": bytes(nodes[level, position].hash).hex(),
                "sums": _sums(bytes(nodes[level, position].sums), snapshot.assets),
            }
            for level, position, side in steps
        ],
    }


@dataclass(frozen=True)
class Solvency:
    """One asset of a snapshot: customer liabilities (the root sum) against what custody reported.

    ``ratio`` is custody / liabilities (``None`` without liabilities or a custody report);
    ``short`` when liabilities exceed custody.
    """

    asset: str
    liabilities: Decimal
    custody: Decimal | None
    decimals: int

    @property
    def ratio(self) -> Decimal | None:
        if self.custody is None or not self.liabilities:
            return None
        return self.custody / self.liabilities

    @property
    def short(self) -> bool:
        return self.custody is not None and self.liabilities > self.custody


def snapshot_solvency(snapshot: LiabilitySnapshot) -> list[Solvency]:
    """Per asset of ``snapshot``: root sum against the custody holdings reported when it was taken plus what of the
    ledger's was in flight to or from custody then (``custody_in_flight``: a withdrawal custody has sent is still a
    liability until its completion is recorded)."""
    holdings, in_flight = snapshot.custody_holdings, snapshot.custody_in_flight or {}

    def custody(code: str) -> Decimal | None:
        if holdings is None:
            return None
        return Decimal(holdings.get(code, "0")) + Decimal(in_flight.get(code, "0"))

    return [
        Solvency(
            asset=asset["code"], liabilities=Decimal(total), custody=custody(asset["code"]), decimals=asset["decimals"]
        )
        for asset, total in zip(snapshot.assets, snapshot.root_sums, strict=True)
    ]
