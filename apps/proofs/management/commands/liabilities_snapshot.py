"""``manage.py liabilities_snapshot``: take a liabilities snapshot at the latest sealed block now.

Exits non-zero with a message, writing nothing, when a customer's stored balance is not the sum of its
postings or a balance cannot be a leaf (negative, inexact, a sum of 2**128 or more).
"""

from django.core.management.base import BaseCommand, CommandError

from apps.core.errors import DomainError
from apps.proofs.balances import BalanceError
from apps.proofs.services import liabilities_snapshot_take
from apps.proofs.sumtree import TreeError


class Command(BaseCommand):
    help = "Build, store and sign a proof-of-liabilities snapshot at the latest sealed block."

    def handle(self, *args, **options):
        try:
            snapshot = liabilities_snapshot_take()
        except DomainError as exc:
            raise CommandError(exc.message) from None
        except (BalanceError, TreeError) as exc:  # a balance no leaf can hold: nothing was written
            raise CommandError(f"No snapshot taken: {exc}.") from None
        totals = ", ".join(
            f"{asset['code']} {total}" for asset, total in zip(snapshot.assets, snapshot.root_sums, strict=True)
        )
        self.stdout.write(
            f"snapshot {snapshot.id} at block {snapshot.block_id}: {snapshot.leaf_count} users, "
            f"root {snapshot.root_hash}; {totals}"
        )
