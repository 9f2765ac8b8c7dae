from celery import shared_task

from .services import reconciliation_run


@shared_task(acks_late=True)
def reconcile_scheduled() -> bool:
    """The hourly reconciliation (celery beat); returns whether every invariant held."""
    return reconciliation_run().ok
