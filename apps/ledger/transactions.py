"""Transactions that retry on deadlock and serialization failure.

PostgreSQL aborts one of two transactions that lock rows in opposite orders
(SQLSTATE 40P01) or that cannot be serialised (40001). Services run their whole
transaction again, a bounded number of times, with a short random back-off; the
error is never turned into "insufficient funds" (DESIGN.md section 6).
"""

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.conf import settings
from django.db import OperationalError, connection, transaction

log = logging.getLogger(__name__)

RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})  # deadlock_detected, serialization_failure

P = ParamSpec("P")
T = TypeVar("T")


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of the psycopg error behind a Django database error, or ``None``."""
    return getattr(exc.__cause__, "sqlstate", None)


def is_retryable(exc: BaseException) -> bool:
    """Whether ``exc`` is a deadlock or serialization failure, judged by its SQLSTATE (never its text)."""
    return isinstance(exc, OperationalError) and sqlstate(exc) in RETRYABLE_SQLSTATES


def retrying_atomic(func: Callable[P, T]) -> Callable[P, T]:
    """Decorate a service so that it runs in ``transaction.atomic()`` and retries on deadlock.

    Inside an enclosing transaction it runs in a savepoint instead: only the outermost
    transaction can be retried, so the outermost caller owns the retry, and the savepoint
    undoes whatever the service wrote before it refused (a caller that catches the error
    keeps none of it). The number of attempts is ``settings.LEDGER_TRANSACTION_ATTEMPTS``.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        if connection.in_atomic_block:
            with transaction.atomic():
                return func(*args, **kwargs)
        attempts = settings.LEDGER_TRANSACTION_ATTEMPTS
        for attempt in range(1, attempts + 1):
            try:
                with transaction.atomic():
                    return func(*args, **kwargs)
            except OperationalError as exc:
                if not is_retryable(exc) or attempt == attempts:
                    raise
                log.info("retrying %s after %s (attempt %d)", func.__qualname__, sqlstate(exc), attempt)
                time.sleep(random.uniform(0, min(0.002 * 2**attempt, 0.2)))
        raise AssertionError("unreachable")

    return wrapper
