"""The sealer's part of ``GET /healthz``: does the chain still hold the head it witnessed, and is it keeping up?"""

import redis
from django.conf import settings

from apps.core.health import waited_seconds

from ..models import BlockEntry, JournalEntry
from .witness import witness_problem


def journal_health() -> str:
    """``"ok"``; else the witness's problem (blocks deleted or rewritten: the sealer refuses to seal until an
    operator accepts the head, :mod:`apps.ledger.seal.witness`), ``"head witness not readable (...)"`` when Redis does
    not answer, or ``"entries unsealed for 75 s"`` when the oldest
    entry after the newest sealed one is older than ``LEDGER_SEAL_GRACE`` (no worker or beat seals them; reconcile's
    invariant 9 fails at the same age). Cheap on any journal: two index reads (the sealer seals in id order; an
    entry committed after a higher id was sealed is left to reconcile)."""
    try:
        problem = witness_problem(strict=True)
    except redis.RedisError as exc:  # break-it review: reported "ok" without having looked
        return f"head witness not readable ({type(exc).__name__})"
    if problem is not None:
        return problem
    sealed = BlockEntry.objects.order_by("-entry_id").values_list("entry_id", flat=True).first() or 0
    oldest = JournalEntry.objects.filter(id__gt=sealed).order_by("id").values_list("created_at", flat=True).first()
    waited = waited_seconds(oldest)
    if waited > settings.LEDGER_SEAL_GRACE:
        return f"entries unsealed for {waited:.0f} s"
    return "ok"
