"""Queueing the wallets' Celery tasks from the services, by task name, when the transaction commits.

The services never import :mod:`apps.wallets.tasks` (which imports them), so the two form no
import cycle; ``apps/wallets/tests/test_inbox.py`` checks that every name here is a task the
worker registers.

The inbox is drained by :func:`apps.wallets.tasks.custody_events_drain`, which credits stored
custody events in batches until none is left. A stored event wakes a drain only when none was
queued in the last ``INBOX_WAKE_SECONDS`` (a Redis key, set with ``SET NX EX`` through Django's
cache), so a burst of callbacks queues a few drains, not one task per callback. A drain that
finds the inbox empty deletes the key and then looks once more (:func:`inbox_drain_done`), so an
event stored while the key was set is never left without a drain. Whatever is left anyway (a
worker killed mid-drain, Redis unreachable at commit) is woken by the sweep
(:func:`apps.wallets.services.custody_events_requeue`) and when a worker starts.
"""

from celery import current_app
from django.core.cache import cache

from apps.core.commit import on_commit_robust

INBOX_DRAIN_TASK = "apps.wallets.tasks.custody_events_drain"
WITHDRAWAL_SUBMIT_TASK = "apps.wallets.tasks.withdrawal_submit"
TASK_NAMES = (INBOX_DRAIN_TASK, WITHDRAWAL_SUBMIT_TASK)

INBOX_WAKE_KEY = "wallets:inbox:drain-queued"
INBOX_RETRY_KEY = "wallets:inbox:retry-queued"
# While a drain is queued or running, stored events queue no other for this long (seconds; Redis's unit).
INBOX_WAKE_SECONDS = 1


def task_send(name: str, *args, countdown: float | None = None) -> None:
    """Queue the task ``name`` with positional ``args`` now (``countdown`` seconds from now if given)."""
    current_app.send_task(name, args=args, countdown=countdown)


def task_send_on_commit(name: str, *args) -> None:
    """Queue the task ``name`` with ``args`` once the current transaction commits (at once outside one).

    A broker that cannot be reached is logged, not raised (:func:`~apps.core.commit.on_commit_robust`): the sweeps
    queue the work again.
    """
    on_commit_robust(task_send, name, *args)


def inbox_drain_wake() -> bool:
    """Queue a drain of the inbox unless one was queued in the last ``INBOX_WAKE_SECONDS``; return whether it
    queued one. Call it after the events were committed."""
    if not cache.add(INBOX_WAKE_KEY, 1, timeout=INBOX_WAKE_SECONDS):
        return False
    task_send(INBOX_DRAIN_TASK)
    return True


def inbox_drain_done() -> None:
    """A drain found the inbox empty: let the next stored event queue a drain. The caller looks at the inbox
    once more after this (an event committed before this call queued nothing, yet is seen then)."""
    cache.delete(INBOX_WAKE_KEY)


def inbox_drain_retry_later(countdown: float) -> bool:
    """Queue one drain ``countdown`` seconds from now for events that were not ready (unless one is queued
    already); return whether it queued one."""
    if not cache.add(INBOX_RETRY_KEY, 1, timeout=max(1, int(countdown))):
        return False
    task_send(INBOX_DRAIN_TASK, countdown=countdown)
    return True
