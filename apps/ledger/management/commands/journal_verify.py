"""``manage.py journal_verify [--from-height N] [--json]``: recompute the sealed journal from the rows.

Exit 0 when every digest, root, chain link and signature verifies with a pinned key (``LEDGER_SIGNING_KEY``'s,
``LEDGER_TRUSTED_PUBLIC_KEYS``), every key in the database is pinned, every liabilities snapshot records the
hash of the chain's block at its height and the chain still holds the head the sealer witnessed outside the database
(:mod:`apps.ledger.seal.witness`: blocks deleted from the top leave a chain that verifies, break-it review); 1
naming the first block (and entry), and each key, snapshot and head, that does not; 2 for a usage error (a bad
argument, ``--from-height`` past the chain's head, a malformed pinned key), which is never a verdict on the journal;
3 when the database could not be reached (:mod:`apps.core.commands`).
``--json`` prints :meth:`~apps.ledger.seal.verification.VerifyResult.as_dict` with ``head_problem`` (``null``, or
the witness's finding) and ``ok`` false when there is one, and ``head_witness``: ``checked``, ``off``
(``LEDGER_SEAL_HEAD_WITNESS`` false) or ``unchecked`` (Redis could not be reached: the head was not compared, and the
text output says so too; break-it review: an auditor without Redis was told "ok" with no word of it).
"""

import json

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from apps.core.commands import database_reachable
from apps.core.errors import NotFound
from apps.ledger.seal.selectors import journal_head
from apps.ledger.seal.verification import journal_verify
from apps.ledger.seal.witness import witness_problem


def _check_sealed(height: int) -> None:
    """:class:`CommandError` (exit 2, a usage error) when no block is sealed at ``height`` yet: past the head,
    verifying from there is not a missing block."""
    try:
        head = journal_head().height
    except NotFound:
        raise CommandError(f"No block at height {height}: nothing is sealed yet.", returncode=2) from None
    if height > head:
        raise CommandError(f"No block at height {height}: the chain's head is block {head}.", returncode=2)


def _head_witnessed() -> tuple[str | None, str]:
    """``(head problem or None, "checked" | "off" | "unchecked")``: :func:`witness_problem`, and whether it could look."""
    if not settings.LEDGER_SEAL_HEAD_WITNESS:
        return None, "off"
    try:
        return witness_problem(strict=True), "checked"
    except redis.RedisError:
        return None, "unchecked"


class Command(BaseCommand):
    help = (
        "Verify every sealed block from the rows against the pinned public keys, the snapshots against the chain "
        "and the chain against its witnessed head; exit 1 naming the first block and entry that differ, and each "
        "unpinned key, snapshot or head that fails."
    )

    def add_arguments(self, parser):
        parser.add_argument("--from-height", type=int, default=0, metavar="N", help="start at block N")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args, **options):
        with database_reachable():
            self.verify(options)

    def verify(self, options) -> None:
        if options["from_height"] < 0:
            raise CommandError("--from-height must be 0 or more.", returncode=2)
        if options["from_height"] > 0:
            _check_sealed(options["from_height"])
        try:
            result = journal_verify(from_height=options["from_height"])
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc), returncode=2) from None
        head_problem, witness = _head_witnessed()  # after the chain, outside any snapshot: a newer block is there too
        ok = result.ok and head_problem is None
        if options["json"]:
            figures = {**result.as_dict(), "ok": ok, "head_problem": head_problem, "head_witness": witness}
            self.stdout.write(json.dumps(figures))
        elif ok:
            unchecked = "; head witness NOT checked (Redis could not be reached)" if witness == "unchecked" else ""
            self.stdout.write(
                f"ok: {result.blocks} blocks, {result.entries} entries, head {result.head_height}, "
                f"{result.references} snapshots, keys {', '.join(result.pinned_keys)}{unchecked}"
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
            if head_problem is not None:
                self.stdout.write(f"FAIL head: {head_problem}")
        if not ok:
            raise SystemExit(1)
