"""Fixtures of the wallets' tests: assets with wallet settings, operators, a real Celery worker.

The worker is a real ``celery -A exchange worker`` process, reading the pytest test database
(``DATABASE_URL`` built from the test connection), the same Redis, and a queue of this test
session only (``CELERY_TASK_DEFAULT_QUEUE``). Its custody callbacks go over real HTTP to
pytest-django's ``live_server``. Tests that use it are ``transaction=True`` so that it, the live
server and the test see each other's commits. A test's workers are stopped when it ends, before
the database is emptied, even when it fails; each worker also dies with the pytest process.
"""

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from django.conf import settings
from django.contrib.auth.models import Permission
from django.db import connection

from apps.ledger.tests.factories import AssetFactory, UserFactory

ROOT = Path(settings.BASE_DIR)
WORKER_START_TIMEOUT = 60
PR_SET_PDEATHSIG = 1


# Assets and people ---------------------------------------------------------------------------------


@pytest.fixture
def usdt(db):
    """USDT (6 decimals) on simnet: fee 0, minimum 1, auto-approved up to 1,000, daily limit 100,000."""
    return AssetFactory(
        code="USDT",
        name="Tether",
        decimals=6,
        network="simnet",
        confirmations_required=1,
        withdrawal_fee=Decimal(0),
        min_withdrawal=Decimal(1),
        withdrawal_auto_approve_limit=Decimal(1000),
        withdrawal_daily_limit=Decimal(100000),
    )


@pytest.fixture
def btc(db):
    """BTC (8 decimals) on simnet: fee 0, minimum 0.0001, auto-approved up to 1, daily limit 10."""
    return AssetFactory(
        code="BTC",
        name="Bitcoin",
        decimals=8,
        network="simnet",
        confirmations_required=1,
        withdrawal_fee=Decimal(0),
        min_withdrawal=Decimal("0.0001"),
        withdrawal_auto_approve_limit=Decimal(1),
        withdrawal_daily_limit=Decimal(10),
    )


def make_operator(username: str | None = None):
    """A user holding ``wallets.approve_withdrawal``."""
    operator = UserFactory.create(**({"username": username} if username else {}))
    permission = Permission.objects.get(content_type__app_label="wallets", codename="approve_withdrawal")
    operator.user_permissions.add(permission)
    return type(operator).objects.get(pk=operator.pk)  # fresh instance: no stale permission cache


@pytest.fixture
def operator(db):
    return make_operator()


def make_blocker():
    """A staff user who may restrict accounts (the permission itself: a transactional test has no groups)."""
    blocker = UserFactory(is_staff=True)
    blocker.user_permissions.add(
        Permission.objects.get(content_type__app_label="accounts", codename="change_accountrestriction")
    )
    return type(blocker).objects.get(pk=blocker.pk)


# Waiting ---------------------------------------------------------------------------------------------


def wait_for(predicate: Callable[[], object], *, timeout: float = 60, message: str = "condition") -> object:
    """Poll ``predicate`` until it returns something truthy (and return it); fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {message}")
        time.sleep(0.05)


def backend_pids(condition: str, params: Sequence[str] = ()) -> list[int]:
    """The pids of the ``pg_stat_activity`` rows that match ``condition`` (SQL, ``%s`` placeholders), read afresh.

    PostgreSQL reads ``pg_stat_activity`` once per transaction and answers every later query of that transaction
    from the same snapshot ("Statistics Functions" in its manual): a test polling it inside its transaction would
    see the first reading for ever. ``pg_stat_clear_snapshot()`` discards the snapshot before each reading.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(f"SELECT pid FROM pg_stat_activity WHERE {condition}", params)
        return [pid for (pid,) in cursor.fetchall()]


def sessions_terminate(app_name: str) -> None:
    """``pg_terminate_backend`` every session of the process that set ``PGAPPNAME`` to ``app_name``."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", [app_name])


# The Celery worker ---------------------------------------------------------------------------------


def database_url(settings_dict: dict) -> str:
    """A ``DATABASE_URL`` for the database Django is connected to (the test database during tests)."""
    user = quote(settings_dict.get("USER") or "", safe="")
    password = settings_dict.get("PASSWORD") or ""
    auth = user + (f":{quote(password, safe='')}" if password else "")
    name = quote(settings_dict["NAME"], safe="")
    host = settings_dict.get("HOST") or ""
    if host.startswith("/"):
        return f"postgresql://{auth}@/{name}?host={quote(host)}"
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    return f"postgresql://{auth}@{host}{port}/{name}"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Worker:
    """One ``celery worker`` process (in its own process group), logging to ``log_path``."""

    def __init__(self, *, name: str, env: dict[str, str], log_path: Path, pool: str, concurrency: int):
        self.name = name
        self.log_path = log_path
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "exchange",
            "worker",
            "--hostname",
            f"{name}@%h",
            "--queues",
            env["CELERY_TASK_DEFAULT_QUEUE"],
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.wait_ready()

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_ready(self) -> None:
        deadline = time.monotonic() + WORKER_START_TIMEOUT
        while " ready." not in self.log():
            if not self.alive():
                raise RuntimeError(f"celery worker {self.name} exited:\n{self.log()[-4000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"celery worker {self.name} did not start:\n{self.log()[-4000:]}")
            time.sleep(0.05)

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)

    def kill(self) -> None:
        """SIGKILL the worker's process group and reap it."""
        self._signal_group(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """Warm shutdown (SIGTERM); SIGKILL if it has not exited within 15 s."""
        if not self.alive():
            return
        self._signal_group(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()


class Workers:
    """Starts worker processes on the session's queue, against the test database, and stops them."""

    def __init__(self, *, env: dict[str, str], log_dir: Path):
        self.env = env
        self.log_dir = log_dir
        self.started: list[Worker] = []

    def start(self, *, pool: str = "threads", concurrency: int = 4, env: dict[str, str] | None = None) -> Worker:
        """Start a worker process (threads pool, 4 threads by default) and wait until it is ready."""
        name = f"w{len(self.started) + 1}"
        worker = Worker(
            name=name,
            env={**self.env, **(env or {})},
            log_path=self.log_dir / f"{name}.log",
            pool=pool,
            concurrency=concurrency,
        )
        self.started.append(worker)
        return worker

    def stop_all(self) -> None:
        """Stop every worker still running."""
        for worker in self.started:
            worker.stop()


@pytest.fixture(scope="session")
def celery_workers(django_db_setup, live_server, tmp_path_factory):
    """Start worker processes against the test database; whatever a test leaves running is stopped at its end
    (see ``workers``), and everything at the end of the session."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "exchange.settings.test",
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_TASK_DEFAULT_QUEUE": settings.CELERY_TASK_DEFAULT_QUEUE,
        "CUSTODY_WEBHOOK_SECRET": settings.CUSTODY_WEBHOOK_SECRET,
        "CUSTODY_CALLBACK_URL": f"{live_server.url}/custody/callbacks/",
        "PYTHONUNBUFFERED": "1",
    }
    workers = Workers(env=env, log_dir=tmp_path_factory.mktemp("celery"))
    try:
        yield workers
    finally:
        workers.stop_all()
        _forget_queue(settings.CELERY_TASK_DEFAULT_QUEUE)


def _forget_queue(queue: str) -> None:
    """Delete the session's queue from Redis, with the unacknowledged messages a killed worker left."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.delete(queue, f"_kombu.binding.{queue}", *client.keys(f"{queue}\x06\x16*"))
        for tag, raw in client.hgetall("unacked").items():
            if json.loads(raw)[-1] == queue:  # [message, exchange, routing key]
                client.hdel("unacked", tag)
                client.zrem("unacked_index", tag)
    finally:
        client.close()


@pytest.fixture
def callback_url(live_server, settings) -> str:
    """Point the simulated custody of this process at the live server's webhook."""
    settings.CUSTODY_CALLBACK_URL = f"{live_server.url}/custody/callbacks/"
    return settings.CUSTODY_CALLBACK_URL


@pytest.fixture
def workers(transactional_db, celery_workers, callback_url) -> Iterator[Workers]:
    """Start workers for this test; those still running are stopped when it ends, before the database is
    emptied for the next test (so no worker writes into the next test, whatever this one left behind).

    The inbox's wake throttle is cleared first: an earlier test's webhook, within its second, would otherwise
    keep this test's first callback from queuing a drain, and no beat runs here to sweep it up."""
    from django.core.cache import cache

    from apps.wallets.queueing import INBOX_RETRY_KEY, INBOX_WAKE_KEY

    cache.delete_many([INBOX_WAKE_KEY, INBOX_RETRY_KEY])
    already = len(celery_workers.started)
    yield celery_workers
    for worker in celery_workers.started[already:]:
        worker.stop()


@pytest.fixture
def worker(workers) -> Worker:
    """A worker process (threads pool, 4 threads) running for this test."""
    return workers.start()
