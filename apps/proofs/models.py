"""Liabilities snapshots (PROOFS.md section 2): the signed header, each user's leaf and the tree's nodes.

A snapshot, its leaves and its nodes are written in one transaction and never change
(append-only triggers). Every node of every level is stored, so any user's path is a
handful of primary-key lookups. Leaves and nodes carry no database foreign keys: a
snapshot writes millions of them at once, and checking each against its snapshot and user
at commit cost more than building the tree; they are only ever written by
:func:`apps.proofs.services.liabilities_snapshot_take`, together with the snapshot they
belong to, from the users the ledger's accounts name.
"""

from django.conf import settings
from django.db import models

from apps.core import triggers as enforced
from apps.ledger.models import JournalBlock, SigningKey


class LiabilitySnapshot(models.Model):
    """The header ``S`` of one snapshot, its hash and signature, and what custody reported when it was taken.

    ``assets`` is ``[{"code", "decimals"}]`` in code order; ``root_sums`` the per-asset totals
    as amount strings in that order. ``custody_holdings`` is ``{code: amount}`` as the custody
    provider reported right after the read (``None`` with ``custody_error`` when it did not answer), and
    ``custody_in_flight`` ``{code: amount}`` what to add to the holdings to stand at the snapshot's block, as the
    liabilities do: reconciliation's in flight (invariant 5: withdrawals custody has sent, deposits custody counts and
    the ledger not yet), read with them, less what the ledger's custody balance moved by since the block (``None`` in
    snapshots taken before it was recorded). The solvency screen compares liabilities with their sum.
    """

    block = models.ForeignKey(JournalBlock, on_delete=models.PROTECT, related_name="+")
    block_hash = models.CharField(max_length=64)
    taken_at = models.DateTimeField()
    assets = models.JSONField()
    leaf_count = models.PositiveIntegerField()
    root_hash = models.CharField(max_length=64)
    root_sums = models.JSONField()
    snapshot_hash = models.CharField(max_length=64, unique=True)
    signature = models.CharField(max_length=128)
    key = models.ForeignKey(SigningKey, on_delete=models.PROTECT, related_name="+")
    custody_holdings = models.JSONField(null=True, blank=True)
    custody_in_flight = models.JSONField(null=True, blank=True)
    custody_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-id"]
        triggers = [enforced.append_only()]

    def __str__(self) -> str:
        return f"snapshot {self.id} at block {self.block_id}"


class LiabilityLeaf(models.Model):
    """A user's leaf in a snapshot: its ``position`` in leaf-id order and the 32-byte ``nonce`` only the
    user is given. The primary key (snapshot, user) makes two leaves for one user impossible."""

    pk = models.CompositePrimaryKey("snapshot_id", "user_id")
    snapshot = models.ForeignKey(LiabilitySnapshot, on_delete=models.PROTECT, related_name="+", db_constraint=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False, db_constraint=False
    )
    position = models.PositiveIntegerField()
    nonce = models.BinaryField()

    class Meta:
        triggers = [enforced.append_only()]

    def __str__(self) -> str:
        return f"user {self.user_id} in snapshot {self.snapshot_id}"


class LiabilityNode(models.Model):
    """Node ``position`` of ``level`` (0 = the leaves): its 32-byte ``hash`` and ``sums`` (u128 per asset)."""

    pk = models.CompositePrimaryKey("snapshot_id", "level", "position")
    snapshot = models.ForeignKey(
        LiabilitySnapshot, on_delete=models.PROTECT, related_name="+", db_index=False, db_constraint=False
    )
    level = models.PositiveSmallIntegerField()
    position = models.PositiveIntegerField()
    hash = models.BinaryField()
    sums = models.BinaryField()

    class Meta:
        triggers = [enforced.append_only()]

    def __str__(self) -> str:
        return f"node {self.level}/{self.position} of snapshot {self.snapshot_id}"
