"""``manage.py journal_verify [--from-height N] [--json]``: recompute the sealed journal from the rows.

Exit 0 when every digest, root, chain link and signature verifies; 1 naming the first block
(and entry) that does not.
"""

import json

from django.core.management.base import BaseCommand, CommandError

from apps.ledger.seal.verification import journal_verify


class Command(BaseCommand):
    help = "Verify every sealed block from the rows; exit 1 naming the first block and entry that differ."

    def add_arguments(self, parser):
        parser.add_argument("--from-height", type=int, default=0, metavar="N", help="start at block N")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args, **options):
        if options["from_height"] < 0:
            raise CommandError("--from-height must be 0 or more.")
        result = journal_verify(from_height=options["from_height"])
        if options["json"]:
            self.stdout.write(json.dumps(result.as_dict()))
        elif result.ok:
            self.stdout.write(f"ok: {result.blocks} blocks, {result.entries} entries, head {result.head_height}")
        else:
            found = result.discrepancy
            entry = f", entry {found.entry}" if found.entry is not None else ""
            self.stdout.write(f"FAIL block {found.height}{entry}: {found.problem}")
        if not result.ok:
            raise SystemExit(1)
