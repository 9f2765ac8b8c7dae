"""Local and test servers do not exhaust PostgreSQL's connections (hole 8)."""

import os
import signal
import subprocess
import sys
import threading

import psycopg
import pytest
import requests
from django.conf import settings
from django.db import connection

from apps.wallets.tests.conftest import backend_pids, database_url, wait_for
from devtools.e2e import free_port

BURST = 20


def _burst(url: str, sessions: list[requests.Session]) -> list[int]:
    """One GET per session, all released at once; the sessions keep their sockets open (HTTP keep-alive)."""
    start = threading.Barrier(len(sessions))
    statuses: list[int] = []

    def get(session: requests.Session) -> None:
        start.wait()
        statuses.append(session.get(url, timeout=60).status_code)

    threads = [threading.Thread(target=get, args=(session,)) for session in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


@pytest.mark.parametrize("module", ["local", "test"])
def test_a_burst_of_parallel_requests_leaves_no_database_connection_open(db, module, tmp_path):
    """20 clients at once, each keeping its HTTP connection alive (as browsers do): once they have their answers,
    the server holds no database connection (with connections kept 60 s per thread it held one per client)."""
    name = f"burst-{module}-{os.getpid()}"
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": f"exchange.settings.{module}",
        "DATABASE_URL": database_url(connection.settings_dict),
        "PGAPPNAME": name,  # libpq's application_name
    }
    env.pop("DATABASE_CONN_MAX_AGE", None)
    log_path = tmp_path / "runserver.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload", "--skip-checks"],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}/api/v1/markets/"
    sessions = [requests.Session() for _ in range(BURST)]
    try:

        def answers() -> bool:
            try:
                return requests.get(url, timeout=5).status_code == 200
            except requests.ConnectionError:
                assert server.poll() is None, log_path.read_text()
                return False

        wait_for(answers, message="runserver to answer")

        statuses = _burst(url, sessions)

        assert statuses == [200] * BURST
        wait_for(
            lambda: not backend_pids("application_name = %s", [name]),
            timeout=10,
            message="the server's database connections to close",
        )
    finally:
        for session in sessions:
            session.close()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_backend_pids_reads_pg_stat_activity_afresh_inside_a_transaction(db):
    """The polls above run inside the test's transaction: without ``pg_stat_clear_snapshot()`` a connection that
    closed after the first reading would still be counted (CI failed on that once: "timed out after 10 s")."""
    name = f"snapshot-{os.getpid()}"
    other = psycopg.connect(database_url(connection.settings_dict), application_name=name)
    try:
        assert backend_pids("application_name = %s", [name]) == [other.info.backend_pid]
    finally:
        other.close()
    wait_for(lambda: not backend_pids("application_name = %s", [name]), timeout=10, message="the closed backend")
