"""Celery tasks of the ledger: the sealer, run by beat every ``LEDGER_SEAL_INTERVAL`` seconds."""

from celery import shared_task

from .seal.services import journal_seal


@shared_task(acks_late=True, ignore_result=True)
def journal_seal_scheduled() -> int:
    """Seal every committed, unsealed entry; returns how many blocks were sealed.

    Safe to run twice at once (the sealer's advisory lock serialises them) and to lose to a
    killed worker (the next run seals what is left).
    """
    return len(journal_seal())
