"""Work handed to the end of the current transaction that must never fail the request or task whose writes committed."""

from collections.abc import Callable

from django.db import transaction


def on_commit_robust(function: Callable[..., object], *args: object) -> None:
    """Call ``function(*args)`` once the current transaction commits (at once outside one); an exception it raises
    is logged, never raised: what the transaction wrote is committed whatever the side effect does (a broker that
    cannot be reached, say: the sweeps send the work again).

    Django's ``on_commit(..., robust=True)`` with a named function, not a ``functools.partial``: Django 5.2 logs a
    failing robust callback by its ``__qualname__``, which a ``partial`` lacks, so the logging itself raised an
    ``AttributeError`` after the commit (a 500 for a withdrawal request that was stored, when Redis was down).
    """

    def call() -> None:
        function(*args)

    call.__qualname__ = getattr(function, "__qualname__", type(function).__qualname__)
    transaction.on_commit(call, robust=True)
