"""Calls released together in real threads, for the tests of races (each thread on its own database connection)."""

import threading

from django.db import connections


def run_concurrently(*calls) -> list:
    """Run each of ``calls`` in its own thread, all released at once by a barrier; return what each returned or the
    exception it raised, in the calls' order. Each thread closes its database connections when done."""
    barrier = threading.Barrier(len(calls))
    results: list[object] = [None] * len(calls)

    def run(index, call):
        try:
            barrier.wait()
            results[index] = call()
        except Exception as exc:  # collected for the test to inspect
            results[index] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(index, call)) for index, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
