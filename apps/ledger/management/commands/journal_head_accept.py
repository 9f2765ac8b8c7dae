"""``manage.py journal_head_accept``: after restoring the database on purpose, make its chain head the witnessed one.

The sealer refuses to seal, and reconcile fails, while the chain lacks the block the sealer last witnessed
outside the database (:mod:`apps.ledger.seal.witness`); a restore from a backup older than that block is such a
case. Run this only once the lost blocks are explained: it is what lets the sealer go on.
"""

import logging

import redis
from django.core.management.base import BaseCommand, CommandError

from apps.ledger.seal.witness import witness_accept, witness_problem

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Accept the database's current chain head as the witnessed one (after a deliberate restore)."

    def handle(self, *args, **options):
        problem = witness_problem()
        try:
            head = witness_accept()
        except redis.RedisError as exc:
            raise CommandError(f"Redis cannot be reached: {exc}") from None
        log.warning("ledger.journal_head_accepted", extra={"head": head, "problem": problem})
        if problem is not None:
            self.stdout.write(f"was: {problem}")
        self.stdout.write("accepted: no blocks" if head is None else f"accepted: block {head[0]}, hash {head[1]}")
