"""Running test calls in real threads, each with its own database connection."""

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.db import connections


def run_concurrently(calls: list[Callable[[], object]], workers: int | None = None) -> list[object]:
    """Run the calls in threads released together by a barrier; return each result or the exception raised.

    With more calls than ``workers`` the pool runs them as threads free up (no barrier).
    Each thread closes its database connections when its call ends.
    """
    workers = workers or len(calls)
    barrier = threading.Barrier(min(workers, len(calls)))

    def run(call):
        try:
            if len(calls) <= workers:
                barrier.wait()
            return call()
        except Exception as exc:  # collected for the test to inspect
            return exc
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run, calls))
