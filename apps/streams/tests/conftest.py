"""Fixtures of the streams' tests: the orders tests' market, two live web processes and the relay.

The processes are started once per session and read the test database, so tests using them are
``transaction=True`` (they see each other's commits; tables are emptied after each test).
"""

from dataclasses import dataclass

import pytest

from apps.orders.tests.conftest import btc_usdt, default_fees  # noqa: F401  (fixtures)

from .processes import LiveProcess, start_relay, start_web


@dataclass
class Servers:
    """``webs``: two ``host:port`` of uvicorn processes; ``relay`` the relay process."""

    webs: list[str]
    relay: LiveProcess
    processes: list[LiveProcess]


@pytest.fixture(scope="session")
def stream_servers(django_db_setup, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("streams")
    processes = []
    try:
        webs = []
        for name in ("web1", "web2"):
            process, address = start_web(log_dir, name)
            processes.append(process)
            webs.append(address)
        relay = start_relay(log_dir)
        processes.append(relay)
        yield Servers(webs, relay, processes)
    finally:
        for process in processes:
            process.stop()
