"""Celery tasks of the wallets: thin callers of one service each, owning the retry policy.

Every task acknowledges late and is re-queued if its worker dies (``acks_late``,
``reject_on_worker_lost``); database errors are retried with exponential back-off. The
services they call are idempotent, so a duplicate or re-queued task changes nothing. When a
task gives up, the beat sweeps queue the work again.
"""

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from apps.core.errors import NotFound

from . import services
from .custody.base import CustodyUnavailable
from .errors import EventNotReady

log = logging.getLogger(__name__)

DATABASE_ERRORS = (OperationalError, InterfaceError)
RELIABLE = {"acks_late": True, "reject_on_worker_lost": True}


@shared_task(
    **RELIABLE,
    autoretry_for=(*DATABASE_ERRORS, EventNotReady),
    retry_backoff=True,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=12,
)
def custody_event_process(event_pk: int) -> str:
    """Apply one custody inbox event (:func:`apps.wallets.services.custody_event_process`); return its state."""
    try:
        return services.custody_event_process(event_pk=event_pk).state
    except NotFound:
        log.warning("custody event %s no longer exists", event_pk)
        return "missing"


@shared_task(
    **RELIABLE,
    autoretry_for=(*DATABASE_ERRORS, CustodyUnavailable),
    retry_backoff=True,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=10,
)
def withdrawal_submit(withdrawal_pk: int) -> str:
    """Submit one approved withdrawal to custody (:func:`apps.wallets.services.withdrawal_submit`); a custody
    timeout is retried with the same withdrawal id, and never releases the hold. Returns its status."""
    try:
        return services.withdrawal_submit(withdrawal_id=withdrawal_pk).status
    except NotFound:
        log.warning("withdrawal %s no longer exists", withdrawal_pk)
        return "missing"


@shared_task(**RELIABLE, autoretry_for=DATABASE_ERRORS, retry_backoff=True, max_retries=3)
def custody_events_sweep() -> int:
    """Beat: re-queue custody events left unprocessed for ``WALLETS_SWEEP_AFTER`` seconds; return how many."""
    return len(services.custody_events_requeue(older_than=timedelta(seconds=settings.WALLETS_SWEEP_AFTER)))


@shared_task(**RELIABLE, autoretry_for=DATABASE_ERRORS, retry_backoff=True, max_retries=3)
def withdrawals_sweep() -> int:
    """Beat: re-queue withdrawals approved ``WALLETS_SWEEP_AFTER`` seconds ago and still not submitted."""
    return len(services.withdrawals_requeue_submission(older_than=timedelta(seconds=settings.WALLETS_SWEEP_AFTER)))


@shared_task(**RELIABLE, autoretry_for=DATABASE_ERRORS, retry_backoff=True, max_retries=3)
def withdrawals_expire_sweep() -> int:
    """Beat: end withdrawals not confirmed by e-mail within ``WITHDRAWAL_CONFIRMATION_MAX_AGE`` seconds (hold
    released); return how many."""
    older_than = timedelta(seconds=settings.WITHDRAWAL_CONFIRMATION_MAX_AGE)
    return len(services.withdrawals_expire_unconfirmed(older_than=older_than))
