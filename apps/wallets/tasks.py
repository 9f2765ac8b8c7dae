"""Celery tasks of the wallets: thin callers of one service each, owning the retry policy.

Every task but the inbox drain acknowledges late and is re-queued if its worker dies
(``acks_late``, ``reject_on_worker_lost``); database errors are retried with exponential
back-off. The services they call are idempotent, so a duplicate or re-queued task changes
nothing. When a task gives up, the beat sweeps queue the work again. The services queue these
tasks by name (:mod:`apps.wallets.queueing`), so this module imports them and not the reverse.
"""

import logging
import time
from datetime import timedelta

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import InterfaceError, OperationalError

from apps.core.errors import NotFound

from . import queueing, services
from .custody.base import CustodyUnavailable

log = logging.getLogger(__name__)

DATABASE_ERRORS = (OperationalError, InterfaceError)
RELIABLE = {"acks_late": True, "reject_on_worker_lost": True}


# A drain credits batches for at most this long (seconds), then queues its continuation and returns, so a
# solo-pool worker also runs its other tasks (withdrawal submissions, e-mail) during a long burst.
DRAIN_BUDGET = 2.0
# Events that were not ready (a withdrawal's outcome before its submission was recorded) are tried again by a
# drain queued this many seconds later.
NOT_READY_RETRY_SECONDS = 1.0


@shared_task(acks_late=False, autoretry_for=DATABASE_ERRORS, retry_backoff=True, retry_backoff_max=30, max_retries=12)
def custody_events_drain() -> int:
    """Credit the stored custody events in batches of ``WALLETS_INBOX_BATCH`` until none is left (or
    ``DRAIN_BUDGET`` seconds passed; then a continuation is queued); return how many events it applied.

    Each batch is one transaction (:func:`apps.wallets.services.custody_events_process_batch`); several
    drains split the inbox between them (rows claimed with ``SKIP LOCKED``). The message is acknowledged
    when the drain starts (not late): it names no event, the inbox rows are the durable record, and a
    drain lost with a killed worker is replaced by the sweep or the next worker's start, so the broker
    has nothing to redeliver an hour later (its visibility timeout).
    """
    limit = settings.WALLETS_INBOX_BATCH
    started = time.monotonic()
    deferred: list[int] = []
    applied = 0
    while True:
        batch = services.custody_events_process_batch(limit=limit, exclude=deferred)
        if not batch.claimed:
            queueing.inbox_drain_done()
            batch = services.custody_events_process_batch(limit=limit, exclude=deferred)
            if not batch.claimed:
                break
        applied += batch.applied
        deferred.extend(batch.deferred)
        if batch.claimed == limit:  # more is waiting: let another worker join
            queueing.inbox_drain_wake()
        if time.monotonic() - started > DRAIN_BUDGET:
            queueing.task_send(queueing.INBOX_DRAIN_TASK)
            break
    if deferred:
        queueing.inbox_drain_retry_later(NOT_READY_RETRY_SECONDS)
    return applied


@worker_ready.connect
def _drain_at_worker_start(**_kwargs) -> None:
    """A worker that starts drains the inbox at once: what a killed worker left is credited without waiting
    for the sweep."""
    queueing.task_send(queueing.INBOX_DRAIN_TASK)


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
    except (*DATABASE_ERRORS, CustodyUnavailable):
        raise  # retried (custody's answer is recorded by the service)
    except Exception as exc:  # a bug of ours: the operators see it on the withdrawal, and the sweep retries it
        services.withdrawal_error_record(
            withdrawal_id=withdrawal_pk, error=f"Internal error: {type(exc).__name__}: {exc}"
        )
        raise


@shared_task(**RELIABLE, autoretry_for=DATABASE_ERRORS, retry_backoff=True, max_retries=3)
def custody_events_sweep() -> int:
    """Beat: wake a drain for custody events left unprocessed (and not being processed) for
    ``WALLETS_INBOX_SWEEP_AFTER`` seconds; return how many there are."""
    older_than = timedelta(seconds=settings.WALLETS_INBOX_SWEEP_AFTER)
    return len(services.custody_events_requeue(older_than=older_than))


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
