"""``manage.py journal_verify [--from-height N] [--json]``: recompute the sealed journal from the rows.

Exit 0 when every digest, root, chain link and signature verifies with a pinned key (``LEDGER_SIGNING_KEY``'s,
``LEDGER_TRUSTED_PUBLIC_KEYS``), every key in the database is pinned and every liabilities snapshot records the
hash of the chain's block at its height; 1 naming the first block (and entry), and each key and snapshot, that
does not; 2 for a usage error (a bad argument, ``--from-height`` past the chain's head, a malformed pinned key),
which is never a verdict on the journal. ``--json`` prints
:meth:`~apps.ledger.seal.verification.VerifyResult.as_dict`.
"""

import json

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from apps.core.errors import NotFound
from apps.ledger.seal.selectors import journal_head
from apps.ledger.seal.verification import journal_verify


def _check_sealed(height: int) -> None:
    """:class:`CommandError` (exit 2, a usage error) when no block is sealed at ``height`` yet: past the head,
    verifying from there is not a missing block."""
    try:
        head = journal_head().height
    except NotFound:
        raise CommandError(f"No block at height {height}: nothing is sealed yet.", returncode=2) from None
    if height > head:
        raise CommandError(f"No block at height {height}: the chain's head is block {head}.", returncode=2)


class Command(BaseCommand):
    help = (
        "Verify every sealed block from the rows against the pinned public keys, and the snapshots against the "
        "chain; exit 1 naming the first block and entry that differ, and each unpinned key or snapshot that fails."
    )

    def add_arguments(self, parser):
        parser.add_argument("--from-height", type=int, default=0, metavar="N", help="start at block N")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args, **options):
        if options["from_height"] < 0:
            raise CommandError("--from-height must be 0 or more.", returncode=2)
        if options["from_height"] > 0:
            _check_sealed(options["from_height"])
        try:
            result = journal_verify(from_height=options["from_height"])
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc), returncode=2) from None
        if options["json"]:
            self.stdout.write(json.dumps(result.as_dict()))
        elif result.ok:
            self.stdout.write(
                f"ok: {result.blocks} blocks, {result.entries} entries, head {result.head_height}, "
                f"{result.references} snapshots, keys {', '.join(result.pinned_keys)}"
            )
        else:
            found = result.discrepancy
            if found:
                entry = f", entry {found.entry}" if found.entry is not None else ""
                self.stdout.write(f"FAIL block {found.height}{entry}: {found.problem}")
            for key in result.key_problems:
                self.stdout.write(f"FAIL key {key['key_id']} ({key['public_key']}): {key['problem']}")
            for reference in result.reference_problems:
                self.stdout.write(
                    f"FAIL {reference['reference']} at block {reference['height']}: {reference['problem']}"
                )
        if not result.ok:
            raise SystemExit(1)
