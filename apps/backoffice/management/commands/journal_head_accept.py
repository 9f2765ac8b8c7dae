"""``manage.py journal_head_accept --operator USERNAME --reason TEXT``: after restoring the database on purpose, make
its chain head the witnessed one, recorded in the audit log.

The sealer refuses to seal, and reconcile fails, while the chain lacks the block the sealer last witnessed
outside the database (:mod:`apps.ledger.seal.witness`); a restore from a backup older than that block is such a
case. Run this only once the lost blocks are explained: it is what lets the sealer go on, so the operator who
answers for it (an active staff user) and the explanation go to the audit log (``journal.head_accept``, with the
problem it cleared and the head it accepted), in the transaction that accepts it (break-it review: it asked for
nothing and left only a log line, so a rewritten history was accepted with no record in the back office).
Exit 2 for a usage error (no reason, no such operator), 1 when Redis cannot be reached; nothing is accepted then.
"""

import logging

import redis
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from apps.audit.services import audit_record
from apps.core.errors import DomainError
from apps.core.reasons import reason_checked
from apps.ledger.seal.witness import witness_accept, witness_problem

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Accept the database's current chain head as the witnessed one (after a deliberate restore), audited."

    def add_arguments(self, parser):
        parser.add_argument("--operator", required=True, metavar="USERNAME", help="the staff user answering for it")
        parser.add_argument("--reason", required=True, help="why the blocks the chain lacks are explained")

    def handle(self, *args, **options):
        try:
            reason = reason_checked(options["reason"])
        except DomainError as exc:
            raise CommandError(f"--reason: {exc.message}", returncode=2) from None
        operator = get_user_model().objects.filter(username=options["operator"], is_active=True, is_staff=True).first()
        if operator is None:
            raise CommandError(f"--operator: no active staff user {options['operator']!r}.", returncode=2)
        problem = witness_problem()
        try:
            with transaction.atomic():
                head = witness_accept()  # Redis: if the audit row's commit then fails, it is accepted unrecorded
                audit_record(
                    actor_id=operator.pk,
                    action="journal.head_accept",
                    object_type="journal",
                    object_id="none" if head is None else head[0],
                    before={"problem": problem},
                    after={"head": None if head is None else {"height": head[0], "hash": head[1]}, "reason": reason},
                )
        except redis.RedisError as exc:
            raise CommandError(f"Redis cannot be reached: {exc}") from None
        log.warning("ledger.journal_head_accepted", extra={"head": head, "problem": problem})
        if problem is not None:
            self.stdout.write(f"was: {problem}")
        self.stdout.write("accepted: no blocks" if head is None else f"accepted: block {head[0]}, hash {head[1]}")
