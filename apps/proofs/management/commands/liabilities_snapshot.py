"""``manage.py liabilities_snapshot``: take a liabilities snapshot at the latest sealed block now."""

from django.core.management.base import BaseCommand, CommandError

from apps.core.errors import DomainError
from apps.proofs.services import liabilities_snapshot_take


class Command(BaseCommand):
    help = "Build, store and sign a proof-of-liabilities snapshot at the latest sealed block."

    def handle(self, *args, **options):
        try:
            snapshot = liabilities_snapshot_take()
        except DomainError as exc:
            raise CommandError(exc.message) from None
        totals = ", ".join(
            f"{asset['code']} {total}" for asset, total in zip(snapshot.assets, snapshot.root_sums, strict=True)
        )
        self.stdout.write(
            f"snapshot {snapshot.id} at block {snapshot.block_id}: {snapshot.leaf_count} users, "
            f"root {snapshot.root_hash}; {totals}"
        )
