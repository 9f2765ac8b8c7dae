"""``manage.py journal_seal``: seal every committed, unsealed journal entry now (what beat does every few seconds)."""

from django.core.management.base import BaseCommand, CommandError

from apps.core.errors import DomainError
from apps.ledger.seal.services import journal_seal


class Command(BaseCommand):
    help = "Seal every committed, unsealed journal entry into new signed blocks."

    def handle(self, *args, **options):
        try:
            blocks = journal_seal()
        except DomainError as exc:  # the chain lost its witnessed head: nothing sealed
            raise CommandError(exc.message) from None
        if not blocks:
            self.stdout.write("nothing to seal")
        for block in blocks:
            self.stdout.write(f"sealed block {block.height}: {block.entry_count} entries, hash {block.block_hash}")
