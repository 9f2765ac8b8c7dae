"""Celery tasks of the proof of liabilities: the daily snapshot (beat)."""

from celery import shared_task

from .services import liabilities_snapshot_take


@shared_task(acks_late=True, ignore_result=True)
def liabilities_snapshot_scheduled() -> int:
    """Take the daily liabilities snapshot at the latest sealed block; returns its id."""
    return liabilities_snapshot_take().id
