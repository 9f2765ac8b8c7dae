"""The simulated provider's background work, run by the exchange's Celery worker: delivering callbacks."""

from celery import shared_task

from .models import SimCallback
from .provider import SimulatedCustody


class CallbackPending(Exception):
    """The callback is still undelivered after this attempt."""


@shared_task(
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(CallbackPending,),
    retry_backoff=True,
    retry_backoff_max=60,
    max_retries=10,
)
def callback_deliver(callback_id: int) -> None:
    """Deliver one callback once it is due; retried with back-off while undelivered.

    Callbacks still undelivered after the retries are delivered by ``manage.py run_custody_simulator``.
    """
    SimulatedCustody().callbacks_deliver_due(callback_ids=[callback_id])
    if SimCallback.objects.filter(pk=callback_id, delivered_at__isnull=True).exists():
        raise CallbackPending(callback_id)  # not delivered, not due yet, or another deliverer holds its lease
