"""Soak with faults: a realistic mix through the real HTTP API, webhook and admin while processes die.

``make soak`` (``SOAK_DURATION=<seconds>``, default 300) or ``python bench/soak.py --duration N``
under ``python -m devtools.localservices exec --``. In a PostgreSQL database and a Celery queue
of its own (created here, dropped at the end) it starts, each in a process group of its own:

- a gunicorn web server (production settings, ``exchange.settings.soak``), and the streams:
  uvicorn serving the WebSockets and the stream relay (SIGKILLed among the faults);
- Celery worker processes (prefork pool), Celery beat (the sweeps every few seconds) and the
  simulated custody provider's delivery loop (``manage.py run_custody_simulator``);
- client processes: traders that log in through ``POST /api/v1/auth/token/``, fund themselves
  by deposits and then place limit and market orders, cancel orders, deposit, withdraw and
  cancel withdrawals through the REST API; as the custody provider they deliver their
  deposits' signed callbacks to the webhook out of order (the ``confirmed`` one often first),
  with duplicates, replays of the very same signed request and forged callbacks (bad
  signature, stale timestamp, tampered body); and an approver that signs in to the admin
  with a TOTP second factor and approves or rejects the withdrawals awaiting approval.

Once the traders are funded, the fault injector (this process) SIGKILLs whole Celery workers
(and starts new ones) and single pool processes (each custody event's transaction is held open
0.1 s, ``WALLETS_EVENT_PROCESSING_DELAY``, so that kills land mid-task), terminates the application's database
connections (``pg_terminate_backend``), and restarts the web server, by SIGKILL or by SIGTERM.
Every kind of fault happens at least once, so a run lasts at least ``--duration`` and at least
one round of faults. The clients also lose a few answers on purpose: a small share of first
attempts of writes time out right after the request went out, so the server acts on a request
whose answer never arrives.

Clients behave like careful real clients: after a connection error, a timeout, a 5xx or a 429
they retry the same request (same ``Idempotency-Key`` and ``client_order_id``, same callback
``event_id``) for up to ``RETRY_WINDOW`` seconds. An operation is *acknowledged* when it was
answered 2xx (200/201), *refused* when answered with a definite 4xx, and *unknown* when no
definite answer came (or a retried cancel or decision was refused: the first attempt may have
applied it). Each client records what it did and what it was told.

Then everything is drained: clients stop, faults stop, the approver decides every withdrawal
still awaiting approval, and the run waits (bounded) until the custody inbox is processed, the
provider has delivered every callback and no withdrawal is in flight; then the services are
stopped and the outcome is read from the database:

- ``reconcile()`` passes (every invariant of DESIGN.md section 5);
- every callback answered 200 is in the inbox, processed; every deposit the provider
  confirmed is credited exactly once with its amount, to the owner of the address, and
  nothing else is credited; forged callbacks left no trace;
- every acknowledged order exists with the terms it was placed with, in a state consistent with
  what the API said (an acknowledged cancel left it cancelled; its fills add up to its filled
  quantity; one hold entry); every acknowledged withdrawal exists with its terms and is final
  (completed, failed, rejected or cancelled, as the acknowledged decisions and cancels say),
  matching the provider's books and the ledger's entries; each request (``Idempotency-Key``,
  ``client_order_id``) was applied at most once, and no order or withdrawal exists that no
  request accounts for;
- no ended order holds anything; no process is left running;
- each market's book kept from its depth stream (a thread per market, starting again from a fresh
  snapshot whenever its connection drops) equals the REST depth at the end (``stream_books``).

*Lost* counts what was acknowledged but is not reflected, and what was applied twice. Prints
JSON lines ``{"bench": "soak", "figure": ...}``: ``operations`` (attempted, acknowledged,
refused, unknown per kind; HTTP retries), ``faults`` (injected per kind), ``checks`` (each
check with what it covered and its problems) and ``result`` (``lost``, ``ok``). Exit status 1
when anything was lost, a check failed or a process was left running.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

D = Decimal
WEB_WORKERS, WEB_THREADS = 2, 4
HTTP_TIMEOUT = 15  # seconds of one HTTP request
RETRY_WINDOW = 45  # seconds a client keeps retrying one operation without a definite answer
START_TIMEOUT = 120  # seconds for the services to become healthy
PR_SET_PDEATHSIG = 1
FAULT_KINDS = (
    "worker_killed",
    "worker_process_killed",
    "db_connections_terminated",
    "web_killed",
    "web_restarted",
    "relay_killed",
)
SIMULATOR_CONFIRMATIONS = 2  # deposits are reported with 0, 1 and 2 confirmations; 2 are required

# (code, decimals, withdrawal fee, min withdrawal, auto-approved up to, daily limit)
ASSETS = [
    ("BTC", 8, D("0.0001"), D("0.001"), D("0.05"), D("100000")),
    ("ETH", 18, D("0.002"), D("0.01"), D("1"), D("1000000")),
    ("USDT", 6, D("1"), D("10"), D("1000"), D("1000000000")),
]
NETWORK_FEES = {"BTC": "0.00001", "ETH": "0.0001", "USDT": "0.5"}
# (base, quote, mid price, tick size, step size, min qty, max qty, min notional)
MARKETS = [
    ("BTC", "USDT", D("50000"), D("0.01"), D("0.0001"), D("0.0001"), D("100"), D("5")),
    ("ETH", "USDT", D("3000"), D("0.01"), D("0.0001"), D("0.001"), D("1000"), D("5")),
]
FUNDING = {"BTC": D("20"), "ETH": D("300"), "USDT": D("2000000")}
DEPOSIT_RANGE = {"BTC": (D("0.01"), D("0.5")), "ETH": (D("0.1"), D("5")), "USDT": (D("100"), D("20000"))}
WITHDRAWAL_ASSETS = ("BTC", "USDT")
# Active entries of each trader's address book per withdrawal asset: each request uses a fresh one (the
# checks match withdrawals to requests by address); a trader who used them all reads instead.
WITHDRAWAL_ADDRESSES = 1500
REPLAY_KINDS = ("replay", "resigned")
FORGED_KINDS = ("bad_signature", "stale_timestamp", "tampered_body")
TRADER_OPERATIONS = {  # weights of the traders' mix
    "order_limit": 40,
    "order_market": 10,
    "order_cancel": 18,
    "deposit": 6,
    "withdrawal": 8,
    "withdrawal_cancel": 3,
    "read": 8,
}


def emit(figure: str, **values) -> None:
    """Print one JSON line of figures."""
    print(json.dumps({"bench": "soak", "figure": figure, **values}, default=str), flush=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def with_database(url: str, name: str) -> str:
    """``url`` with its database name replaced by ``name``."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def amount_text(value: Decimal) -> str:
    """A plain decimal string (never an exponent)."""
    return f"{value.normalize():f}" if value else "0"


# Processes -----------------------------------------------------------------------------------------


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Process:
    """A child process in a session (and process group) of its own, logging to a file; dies with this process."""

    def __init__(self, name: str, command: list[str], env: dict, log_path: Path):
        self.name, self.command, self.env, self.log_path = name, command, env, log_path
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        """Whether the process itself is still running."""
        return self.popen.poll() is None

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to every process of its group (a no-op once the group is gone)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL the whole group and reap the process."""
        self.signal_group(signal.SIGKILL)
        self.popen.wait()

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM the group, then SIGKILL it if the process has not exited within ``timeout`` seconds;
        whatever is left of the group is killed too."""
        if self.alive():
            self.signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=timeout)
        self.kill()

    def log_tail(self, chars: int = 3000) -> str:
        """The end of its log."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class Processes:
    """Every process the soak starts, so that all of them are stopped at the end, even on failure."""

    def __init__(self, env: dict, log_dir: Path):
        self.env, self.log_dir = env, log_dir
        self.started: list[Process] = []
        self.counts: Counter = Counter()

    def start(self, name: str, command: list[str], env: dict | None = None) -> Process:
        """Start ``command`` as process ``name`` (numbered when started again)."""
        self.counts[name] += 1
        label = name if self.counts[name] == 1 else f"{name}-{self.counts[name]}"
        process = Process(label, command, {**self.env, **(env or {})}, self.log_dir / f"{label}.log")
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        """Stop every process started (clients first, then the services)."""
        for process in reversed(self.started):
            process.stop(timeout=15)

    def left_running(self) -> list[str]:
        """Processes of any group the soak started that are still running (zombies aside)."""
        import psutil

        groups = {process.pid for process in self.started}
        left = []
        for candidate in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                if os.getpgid(candidate.pid) in groups and candidate.info["status"] != psutil.STATUS_ZOMBIE:
                    left.append(f"{candidate.pid} {' '.join(candidate.info['cmdline'] or [])[:100]}")
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return left


class Web:
    """The gunicorn server; the fault injector kills or restarts it."""

    def __init__(self, processes: Processes, port: int):
        self.processes, self.port = processes, port
        self.base_url = f"http://127.0.0.1:{port}"
        self.process: Process | None = None

    def start(self) -> None:
        """Start gunicorn on the port (workers x threads as in production, scaled down)."""
        self.process = self.processes.start(
            "web",
            [
                sys.executable,
                "-m",
                "gunicorn",
                "exchange.wsgi",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                str(WEB_WORKERS),
                "--threads",
                str(WEB_THREADS),
                "--graceful-timeout",
                "5",
                "--timeout",
                "60",
                "--log-level",
                "warning",
            ],
        )

    def restart(self, *, kill: bool) -> None:
        """Stop the server (SIGKILL of its group, or SIGTERM: a graceful stop) and start a new one."""
        if kill:
            self.process.kill()
        else:
            self.process.stop(timeout=15)
        self.start()

    def healthy(self) -> bool:
        """``GET /healthz`` answers 200 (database, Redis and a worker on our queue)."""
        import requests

        try:
            return requests.get(f"{self.base_url}/healthz", timeout=5).status_code == 200
        except requests.RequestException:
            return False


class Streams:
    """The streams: uvicorn serving WebSockets (``exchange.asgi``) and the relay; the fault injector kills the relay.

    A thread per market follows its depth stream with :class:`apps.streams.book.LocalBook`, starting
    again from a fresh snapshot whenever the connection drops or closes on a gap (``resyncs``).
    """

    def __init__(self, processes: Processes, port: int):
        self.processes, self.port = processes, port
        self.relay: Process | None = None
        self.books: dict[str, object] = {}
        self.resyncs: Counter = Counter()
        self.stopped = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        command = [sys.executable, "-m", "uvicorn", "exchange.asgi:application", "--host", "127.0.0.1"]
        self.web = self.processes.start("streams", [*command, "--port", str(self.port), "--log-level", "warning"])
        self.start_relay()

    def start_relay(self) -> None:
        self.relay = self.processes.start("relay", [sys.executable, "manage.py", "run_stream_relay"])

    def kill_relay(self) -> None:
        """SIGKILL the relay (mid-round, its rows are published again) and start another."""
        self.relay.kill()
        self.start_relay()

    def alive(self) -> bool:
        return self.web.alive() and self.relay.alive()

    def follow(self, symbols: list[str], base_url: str) -> None:
        """Follow each market's depth stream in a thread of its own until :meth:`stop`."""
        for symbol in symbols:
            thread = threading.Thread(target=self._follow, args=(symbol, base_url), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _follow(self, symbol: str, base_url: str) -> None:
        import requests
        from websockets.exceptions import WebSocketException
        from websockets.sync.client import connect

        from apps.streams.book import Gap, LocalBook

        stream = f"ws://127.0.0.1:{self.port}/ws/{symbol.replace('-', '').lower()}@depth"
        while not self.stopped.is_set():
            book = LocalBook()
            try:
                with connect(stream, open_timeout=10) as connection:
                    while not self.stopped.is_set():
                        try:
                            book.on_event(json.loads(connection.recv(timeout=0.5)))
                        except TimeoutError:
                            pass
                        if book.last_update_id is None and book.buffer:
                            depth = requests.get(f"{base_url}/api/v1/markets/{symbol}/depth/?limit=1000", timeout=10)
                            book.snapshot(depth.json())
                        if book.last_update_id is not None:
                            self.books[symbol] = book
            except (OSError, WebSocketException, Gap, ValueError, requests.RequestException):
                pass
            if not self.stopped.is_set():
                self.resyncs[symbol] += 1
                time.sleep(0.5)

    def stop(self) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=10)


class WorkerPool:
    """Celery worker processes (prefork pool) on the soak's queue; the fault injector kills them."""

    def __init__(self, processes: Processes, queue: str, size: int, run: str):
        self.processes, self.queue, self.size, self.run = processes, queue, size, run
        self.workers: list[Process] = []
        self.serial = 0

    def start_one(self) -> Process:
        """Start one worker process with a pool of two."""
        self.serial += 1
        worker = self.processes.start(
            "worker",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "exchange",
                "worker",
                "--hostname",
                f"soak-{self.run}-w{self.serial}@%h",
                "--queues",
                self.queue,
                "--pool",
                "prefork",
                "--concurrency",
                "2",
                "--loglevel",
                "WARNING",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
        )
        self.workers.append(worker)
        return worker

    def replenish(self) -> None:
        """Start workers until ``size`` are running."""
        self.workers = [worker for worker in self.workers if worker.alive()]
        while len(self.workers) < self.size:
            self.start_one()

    def kill_worker(self, rng: random.Random) -> None:
        """SIGKILL a whole worker (main process and pool) and start a new one."""
        victim = rng.choice([worker for worker in self.workers if worker.alive()])
        victim.kill()
        self.replenish()

    def kill_pool_process(self, rng: random.Random) -> bool:
        """SIGKILL one pool process of a worker (the worker replaces it); False if none was found."""
        import psutil

        for worker in rng.sample(self.workers, len(self.workers)):
            try:
                children = psutil.Process(worker.pid).children()
            except psutil.Error:
                continue
            if children:
                try:
                    rng.choice(children).kill()
                except psutil.Error:
                    continue
                return True
        return False


def terminate_backends(admin_url: str, database: str) -> int:
    """``pg_terminate_backend`` every connection to ``database`` (the application's); return how many."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [database],
        ).fetchall()
    return sum(1 for (done,) in rows if done)


# HTTP clients --------------------------------------------------------------------------------------


@dataclass
class Answer:
    """A definite HTTP answer (anything but a connection error, timeout, 5xx or 429)."""

    status: int
    body: object
    attempts: int
    replayed: bool = False
    location: str = ""

    @property
    def ok(self) -> bool:
        """Answered 2xx."""
        return 200 <= self.status < 300

    @property
    def code(self) -> str:
        """The API's error code (``insufficient_funds`` ...), or the status as text."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return str(self.body["error"].get("code"))
        return str(self.status)


class Http:
    """A requests session that retries like a careful client: the same request again after a connection
    error, a timeout, a 5xx or a 429, with back-off, for up to ``RETRY_WINDOW`` seconds."""

    def __init__(self, base_url: str, stats: Counter, rng: random.Random, drop_rate: float = 0.0):
        import requests

        self.base_url, self.stats, self.rng, self.drop_rate = base_url, stats, rng, drop_rate
        self.session = requests.Session()

    def call(
        self,
        method: str,
        path: str,
        *,
        json_body=None,
        data: bytes | dict | None = None,
        headers: dict | None = None,
        window: float = RETRY_WINDOW,
        on_response=None,
    ) -> Answer | None:
        """Send the request until a definite answer; ``None`` when none came within ``window`` seconds.

        Redirects are not followed. ``on_response(response)`` sees every response (cookies).
        """
        import requests

        deadline = time.monotonic() + window
        attempt = 0
        while True:
            attempt += 1
            self.stats["requests"] += 1
            timeout = HTTP_TIMEOUT
            if method != "GET" and attempt == 1 and self.rng.random() < self.drop_rate:
                timeout = (HTTP_TIMEOUT, 0.001)  # the request goes out, its answer is lost: the client times out
                self.stats["answers_dropped"] += 1
            try:
                response = self.session.request(
                    method,
                    self.base_url + path,
                    json=json_body,
                    data=data,
                    headers=headers,
                    timeout=timeout,
                    allow_redirects=False,
                )
            except requests.RequestException:
                self.stats["connection_errors"] += 1
            else:
                if on_response is not None:
                    on_response(response)
                if response.status_code < 500 and response.status_code != 429:
                    if attempt > 1:
                        self.stats["retried_operations"] += 1
                    replayed = response.headers.get("Idempotent-Replayed") == "true"
                    self.stats["idempotent_replays"] += replayed
                    return Answer(
                        response.status_code, _body(response), attempt, replayed, response.headers.get("Location", "")
                    )
                self.stats["server_errors" if response.status_code >= 500 else "rate_limited"] += 1
            if time.monotonic() > deadline:
                self.stats["gave_up"] += 1
                return None
            time.sleep(min(0.1 * 2**attempt, 2.0) * self.rng.uniform(0.5, 1.0))


def _body(response):
    if "json" in response.headers.get("Content-Type", ""):
        try:
            return response.json()
        except ValueError:
            return None
    return response.text


class Outcomes:
    """What one client attempted, and what it was told: per kind, attempted, acknowledged, refused, unknown."""

    def __init__(self):
        self.attempted: Counter = Counter()
        self.acknowledged: Counter = Counter()
        self.refused: Counter = Counter()
        self.unknown: Counter = Counter()
        self.refusal_codes: Counter = Counter()

    def record(self, kind: str, answer: Answer | None) -> str:
        """Count one operation of ``kind``; return ``acknowledged``, ``refused`` or ``unknown``."""
        if answer is None:
            return self.count(kind, "unknown")
        if answer.ok:
            return self.count(kind, "acknowledged")
        return self.count(kind, "refused", answer.code)

    def count(self, kind: str, outcome: str, code: str = "") -> str:
        """Count one operation of ``kind`` with that ``outcome`` (and refusal ``code``); return the outcome."""
        self.attempted[kind] += 1
        getattr(self, outcome)[kind] += 1
        if outcome == "refused":
            self.refusal_codes[f"{kind}:{code}"] += 1
        return outcome

    def as_dict(self) -> dict:
        """The counters as plain dictionaries."""
        return {
            name: dict(getattr(self, name))
            for name in ("attempted", "acknowledged", "refused", "unknown", "refusal_codes")
        }


# The custody provider's side (client processes) ------------------------------------------------------


def provider_call(function, *, window: float = RETRY_WINDOW):
    """Run one call of the simulated provider (its own tables), again after a dropped database connection."""
    from django.db import DatabaseError, close_old_connections, connections

    deadline = time.monotonic() + window
    while True:
        close_old_connections()
        try:
            return function()
        except DatabaseError:
            connections.close_all()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# Clients -------------------------------------------------------------------------------------------


class Client:
    """What every client process shares: its configuration, HTTP session, counters and the stop files."""

    role = "client"
    drop_rate = 0.0  # share of first attempts of writes whose answer the client loses (times out on)

    def __init__(self, config: dict, index: int):
        self.config, self.index = config, index
        self.rng = random.Random(f"{config['seed']}-{self.role}-{index}")
        self.stats: Counter = Counter()
        self.outcomes = Outcomes()
        self.http = Http(config["base_url"], self.stats, self.rng, drop_rate=self.drop_rate)
        self.work_dir = Path(config["work_dir"])
        self.anomalies: list[str] = []

    def stopping(self) -> bool:
        """The orchestrator asked the clients to stop."""
        return (self.work_dir / "stop").exists()

    def result(self) -> dict:
        """The record the orchestrator reads afterwards."""
        return {
            "role": self.role,
            "index": self.index,
            "outcomes": self.outcomes.as_dict(),
            "http": dict(self.stats),
            "anomalies": self.anomalies,
        }


class Trader(Client):
    """A trader: the REST API with an API key, and the custody provider's side of the trader's deposits."""

    role = "trader"
    drop_rate = 0.03

    def __init__(self, config: dict, index: int):
        super().__init__(config, index)
        self.user = config["traders"][index]
        self.markets = config["markets"]
        self.orders: list[dict] = []
        self.open_orders: list[int] = []
        self.order_cancels: list[dict] = []
        self.withdrawals: list[dict] = []
        self.cancellable_withdrawals: list[int] = []
        self.withdrawal_cancels: list[dict] = []
        self.deposits: list[dict] = []
        self.callbacks: list[dict] = []
        self.forged: list[dict] = []
        self.addresses: dict[str, str] = {}
        self.sent: list[tuple[bytes, dict]] = []
        self.serial = 0

    # Setting up ---------------------------------------------------------------------------------

    def log_in(self) -> None:
        """Exchange the password and a one-time password for an API key that may trade and withdraw
        (``POST /auth/token/``), retrying until answered. A code is accepted once: when an attempt whose answer
        was lost used it, the retry is refused (``invalid_otp``) and the next time step's code is sent."""
        from django_otp.oath import totp

        for _ in range(3):
            step = int(time.time()) // 30
            body = {
                "username": self.user["username"],
                "password": self.user["password"],
                "scopes": ["read", "trade", "withdraw"],
                "otp": f"{totp(bytes.fromhex(self.user['otp_key'])):06d}",
            }
            try:
                answer = self._until_answered("log_in", "POST", "/api/v1/auth/token/", json_body=body)
            except RuntimeError as refused:
                if "invalid_otp" not in str(refused):
                    raise
                time.sleep(max(0.0, (step + 1) * 30 - time.time()) + 0.1)
                continue
            self.http.session.headers["Authorization"] = f"Token {answer.body['token']}"
            return
        raise RuntimeError("the one-time password was refused three times")

    def _until_answered(self, kind: str, method: str, path: str, **request) -> Answer:
        """A request the client cannot do without: retried for up to three windows; a refusal is fatal."""
        for _ in range(3):
            answer = self.http.call(method, path, **request)
            self.outcomes.record(kind, answer)
            if answer is not None and answer.ok:
                return answer
            if answer is not None:
                raise RuntimeError(f"{method} {path} refused: {answer.status} {answer.body}")
        raise RuntimeError(f"no answer to {method} {path} for {3 * RETRY_WINDOW} s")

    def deposit_address(self, asset: str) -> str:
        """The trader's deposit address for ``asset`` (``GET /deposit-address/{asset}/``, asked once)."""
        if asset not in self.addresses:
            answer = self._until_answered("deposit_address", "GET", f"/api/v1/deposit-address/{asset}/")
            self.addresses[asset] = answer.body["address"]
        return self.addresses[asset]

    def fund(self) -> None:
        """Deposit the starting funds (with one replay, one re-signed duplicate and one forged callback of each
        kind among them), then wait (bounded) until the balances show them."""
        for asset, amount in FUNDING.items():
            self.deposit(asset=asset, amount=amount, extras=False)
        for kind in REPLAY_KINDS:
            self._replay(kind)
        for kind in FORGED_KINDS:
            self._forge(kind, asset="BTC")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.stopping():
            answer = self.http.call("GET", "/api/v1/balances/")
            if answer is not None and answer.ok:
                available = {row["asset"]: D(row["available"]) for row in answer.body}
                if all(available.get(asset, 0) >= amount for asset, amount in FUNDING.items()):
                    return
            time.sleep(0.5)

    # The mix ------------------------------------------------------------------------------------

    def run(self) -> None:
        """Log in, fund, say so (a ``ready-`` file), then run the mix until asked to stop."""
        self.log_in()
        self.fund()
        (self.work_dir / f"ready-trader-{self.index}").touch()
        operations, weights = zip(*TRADER_OPERATIONS.items(), strict=True)
        while not self.stopping():
            operation = self.rng.choices(operations, weights)[0]
            getattr(self, operation)()
            time.sleep(self.rng.uniform(0, 0.05))

    def next_id(self) -> str:
        """A new request id: the ``client_order_id`` / ``Idempotency-Key`` of one operation, unique in the run."""
        self.serial += 1
        return f"soak-{self.config['run']}-t{self.index}-{self.serial}-{uuid.uuid4().hex[:8]}"

    def _market(self) -> dict:
        return self.rng.choice(self.markets)

    def _place(self, kind: str, body: dict) -> None:
        client_order_id = self.next_id()
        body = {**body, "client_order_id": client_order_id}
        answer = self.http.call("POST", "/api/v1/orders/", json_body=body, headers={"Idempotency-Key": client_order_id})
        outcome = self.outcomes.record(kind, answer)
        record = {"client_order_id": client_order_id, "request": body, "outcome": outcome}
        if outcome == "acknowledged":
            order = answer.body
            record.update(id=order["id"], status=order["status"], filled_qty=order["filled_qty"])
            if order["client_order_id"] != client_order_id:
                self.anomalies.append(
                    f"order {order['id']} acknowledged with client_order_id "
                    f"{order['client_order_id']!r}, not {client_order_id!r}"
                )
            if order["status"] in ("open", "partially_filled"):
                self.open_orders.append(order["id"])
        elif outcome == "refused":
            record["code"] = answer.code
            if answer.code == "idempotency_conflict":
                self.anomalies.append(f"order {client_order_id}: a retry of the same request was a conflict")
        self.orders.append(record)

    def order_limit(self) -> None:
        """A limit order near the mid: mostly resting (GTC), some crossing, some IOC/FOK, some post-only."""
        market = self._market()
        mid, tick, step = D(market["mid"]), D(market["tick"]), D(market["step"])
        side = self.rng.choice(["buy", "sell"])
        offset = tick * self.rng.randint(-4, 15) * (-1 if side == "buy" else 1)  # negative offsets cross
        time_in_force = self.rng.choices(["GTC", "IOC", "FOK"], [8, 1, 1])[0]
        body = {
            "market": market["symbol"],
            "side": side,
            "type": "limit",
            "price": amount_text(mid + offset),
            "qty": amount_text(step * self.rng.randint(market["min_steps"], market["max_steps"])),
            "time_in_force": time_in_force,
            "post_only": time_in_force == "GTC" and self.rng.random() < 0.1,
        }
        self._place("order_limit", body)

    def order_market(self) -> None:
        """A market order: a buy by quote budget or by quantity, or a sell by quantity."""
        market = self._market()
        step = D(market["step"])
        kind = self.rng.choice(["budget", "buy", "sell"])
        body = {
            "market": market["symbol"],
            "type": "market",
            "time_in_force": "IOC",
            "side": "sell" if kind == "sell" else "buy",
        }
        if kind == "budget":
            body["quote_qty"] = amount_text(D(self.rng.randint(20, 2000)))
        else:
            body["qty"] = amount_text(step * self.rng.randint(market["min_steps"], market["max_steps"] // 2))
        self._place("order_market", body)

    def order_cancel(self) -> None:
        """Cancel one of the trader's orders believed open (``DELETE /orders/{id}/``)."""
        if not self.open_orders:
            return self.order_limit()
        order_id = self.open_orders.pop(self.rng.randrange(len(self.open_orders)))
        answer = self.http.call("DELETE", f"/api/v1/orders/{order_id}/")
        outcome = self._cancel_outcome("order_cancel", answer, f"order {order_id}")
        self.order_cancels.append(
            {
                "id": order_id,
                "outcome": outcome,
                "status": answer.body.get("status") if outcome == "acknowledged" else None,
            }
        )

    def _cancel_outcome(self, kind: str, answer: Answer | None, what: str) -> str:
        """Count a cancel: a 409 after a retry is unknown (an earlier attempt may have cancelled it before its
        answer was lost); a refusal other than ``invalid_state`` is an anomaly."""
        if answer is not None and not answer.ok and answer.attempts > 1 and answer.code == "invalid_state":
            return self.outcomes.count(kind, "unknown")
        outcome = self.outcomes.record(kind, answer)
        if outcome == "refused" and answer.code != "invalid_state":
            self.anomalies.append(f"cancel of {what} refused with {answer.status} {answer.code}")
        return outcome

    def read(self) -> None:
        """Read-only calls a trader's screen makes: balances, open orders, deposits, fills."""
        path = self.rng.choice(
            [
                "/api/v1/balances/",
                "/api/v1/orders/?status=open",
                "/api/v1/deposits/",
                "/api/v1/trades/",
                "/api/v1/withdrawals/",
            ]
        )
        self.outcomes.record("read", self.http.call("GET", path))

    # Withdrawals --------------------------------------------------------------------------------

    def withdrawal(self) -> None:
        """Request a withdrawal to a fresh address of the trader's address book: half small (approved at once),
        half for an approver."""
        asset = self.rng.choice(WITHDRAWAL_ASSETS)
        unused = self.user["withdrawal_addresses"][asset]
        if not unused:
            return self.read()
        limits = self.config["assets"][asset]
        minimum, auto = D(limits["min_withdrawal"]), D(limits["auto_approve"])
        quantum = D(1).scaleb(-min(limits["decimals"], 4))
        if self.rng.random() < 0.5:
            amount = minimum + quantum * self.rng.randint(0, int((auto - minimum) / quantum))
        else:
            amount = auto + quantum * self.rng.randint(1, int(2 * auto / quantum))
        key = self.next_id()
        address = unused.pop()
        body = {"asset": asset, "amount": amount_text(amount), "address": address}
        answer = self.http.call("POST", "/api/v1/withdrawals/", json_body=body, headers={"Idempotency-Key": key})
        outcome = self.outcomes.record("withdrawal", answer)
        record = {"key": key, "request": body, "outcome": outcome}
        if outcome == "acknowledged":
            record.update(id=answer.body["id"], status=answer.body["status"])
            if answer.body["status"] == "awaiting_approval":
                self.cancellable_withdrawals.append(answer.body["id"])
                if self.rng.random() < 0.2:
                    self.withdrawals.append(record)
                    return self.withdrawal_cancel()  # changed their mind at once, racing the approver
        elif outcome == "refused":
            record["code"] = answer.code
            if answer.code == "idempotency_conflict":
                self.anomalies.append(f"withdrawal {key}: a retry of the same request was a conflict")
        self.withdrawals.append(record)

    def withdrawal_cancel(self) -> None:
        """Cancel a withdrawal that was awaiting approval (the approver may decide first: then 409)."""
        if not self.cancellable_withdrawals:
            return self.withdrawal()
        withdrawal_id = self.cancellable_withdrawals.pop()  # the latest: the approver may not have seen it yet
        answer = self.http.call("DELETE", f"/api/v1/withdrawals/{withdrawal_id}/")
        outcome = self._cancel_outcome("withdrawal_cancel", answer, f"withdrawal {withdrawal_id}")
        self.withdrawal_cancels.append({"id": withdrawal_id, "outcome": outcome})

    # Deposits: the custody provider's side ------------------------------------------------------

    def deposit(self, *, asset: str | None = None, amount: Decimal | None = None, extras: bool = True) -> None:
        """Coins arrive at the trader's address at the provider, which reports them to the webhook out of order;
        with ``extras``, now and then a duplicate (a replay) and a forged callback alongside."""
        from apps.wallets.custody.simulator.models import SimCallback, SimDeposit
        from apps.wallets.custody.simulator.provider import SimulatedCustody

        asset = asset or self.rng.choice(list(DEPOSIT_RANGE))
        if amount is None:
            low, high = DEPOSIT_RANGE[asset]
            amount = (low + (high - low) * D(self.rng.random())).quantize(D("0.0001"))
        address = self.deposit_address(asset)
        txid = self.next_id().replace("soak-", "tx-")
        custody = SimulatedCustody()

        def receive():
            existing = SimDeposit.objects.filter(txid=txid).first()  # a retry after a lost commit
            return existing or custody.deposit_receive(address=address, amount=amount, txid=txid, delay=0)

        received = provider_call(receive)
        self.deposits.append(
            {"txid": txid, "vout": 0, "asset": asset, "amount": amount_text(amount), "address": address}
        )
        callbacks = provider_call(
            lambda: list(
                SimCallback.objects.filter(deposit=received).order_by("id").values_list("pk", "event_id", "payload")
            )
        )
        order = self.rng.choices(["confirmed_first", "shuffled", "in_order"], [4, 4, 2])[0]
        if order == "confirmed_first":
            callbacks.reverse()
        elif order == "shuffled":
            self.rng.shuffle(callbacks)
        for pk, event_id, payload in callbacks:
            record = {
                "event_id": event_id,
                "txid": txid,
                "status": payload["status"],
                "confirmations": payload["confirmations"],
                "kind": "delivery",
                "answers": [],
            }
            self.callbacks.append(record)
            provider_call(
                lambda pk=pk, record=record: custody.callbacks_deliver_due(callback_ids=[pk], send=self._sender(record))
            )
            self.stats[f"deposit_callbacks_{order}"] += 1
        if extras and self.rng.random() < 0.5:
            self._replay(self.rng.choice(REPLAY_KINDS))
        if extras and self.rng.random() < 0.15:
            self._forge(self.rng.choice(FORGED_KINDS), asset=asset)

    def _post_callback(self, kind: str, body: bytes, headers: dict, window: float = RETRY_WINDOW) -> Answer | None:
        answer = self.http.call("POST", "/custody/callbacks/", data=body, headers=headers, window=window)
        self.outcomes.record(kind, answer)
        return answer

    def _sender(self, record: dict):
        """The provider's ``send(body, headers)``: POST it (retrying until answered), remember the request."""

        def send(body: bytes, headers) -> int | None:
            headers = dict(headers)
            answer = self._post_callback("callback", body, headers)
            record["answers"].append(answer.status if answer else None)
            self.sent.append((body, headers))
            self.sent = self.sent[-20:]
            return answer.status if answer else None

        return send

    def _replay(self, kind: str) -> None:
        """Send an earlier callback again: the very same signed request (``replay``), or the same body signed
        anew (``resigned``)."""
        from apps.wallets.custody.signing import signed_headers

        if not self.sent:
            return
        body, headers = self.rng.choice(self.sent)
        if kind == "resigned":
            headers = signed_headers(secret=self.config["webhook_secret"], body=body)
        payload = json.loads(body)
        record = {
            "event_id": payload["event_id"],
            "txid": payload["txid"],
            "status": payload["status"],
            "confirmations": payload.get("confirmations"),
            "kind": kind,
            "answers": [],
        }
        answer = self._post_callback(f"callback_{kind}", body, headers)
        record["answers"].append(answer.status if answer else None)
        self.callbacks.append(record)
        if answer is not None and answer.status != 200:  # a duplicate is answered 200, and stored once
            self.anomalies.append(f"a {kind} of callback {payload['event_id']} answered {answer.status}")

    def _forge(self, kind: str, *, asset: str) -> None:
        """A callback the webhook must refuse (401) and forget: a wrong secret (``bad_signature``), a stale
        timestamp (``stale_timestamp``), or a real callback's signature over a tampered body (``tampered_body``)."""
        from apps.wallets.custody.signing import signed_headers

        address = self.deposit_address(asset)
        secret = self.config["webhook_secret"]
        txid = self.next_id().replace("soak-", "forged-")
        payload = {
            "event_id": uuid.uuid4().hex,
            "type": "deposit",
            "asset": asset,
            "address": address,
            "amount": "1000",
            "txid": txid,
            "vout": 0,
            "confirmations": 5,
            "status": "confirmed",
        }
        body = json.dumps(payload, separators=(",", ":")).encode()
        if kind == "bad_signature":
            headers = signed_headers(secret=secrets.token_hex(32), body=body)
        elif kind == "stale_timestamp":
            headers = signed_headers(secret=secret, body=body, timestamp=int(time.time()) - 3600)
        else:
            if not self.sent:
                return
            original, headers = self.rng.choice(self.sent)
            tampered = json.loads(original)
            tampered["amount"] = amount_text(D(tampered["amount"]) * 100)
            body = json.dumps(tampered, separators=(",", ":")).encode()
            payload = tampered
        answer = self._post_callback("forged_callback", body, headers)
        self.forged.append(
            {
                "kind": kind,
                "event_id": payload["event_id"],
                "txid": payload["txid"],
                "amount": payload["amount"],
                "answer": answer.status if answer else None,
            }
        )
        if answer is not None and answer.status != 401:
            self.anomalies.append(f"forged callback ({kind}) answered {answer.status}")

    def result(self) -> dict:
        """The trader's record: what it asked for and what it was told, operation by operation."""
        return {
            **super().result(),
            "user": self.user["username"],
            "orders": self.orders,
            "order_cancels": self.order_cancels,
            "withdrawals": self.withdrawals,
            "withdrawal_cancels": self.withdrawal_cancels,
            "deposits": self.deposits,
            "callbacks": self.callbacks,
            "forged": self.forged,
        }


class Approver(Client):
    """An approver in the back office: signs in with password and TOTP, approves or rejects the queue.

    Its browser sits where the TLS-terminating proxy would, so it keeps the cookies itself: the
    production settings mark them secure, and a cookie jar would not send them over plain HTTP.
    """

    role = "approver"
    drop_rate = 0.05
    QUEUE = "backoffice/withdrawalapproval/"

    def __init__(self, config: dict, index: int):
        super().__init__(config, index)
        self.user = config["approver"]
        self.admin = "/" + config["admin_url"]
        self.cookies: dict[str, str] = {}
        self.totp_key: str | None = None
        self.last_step = -1
        self.decisions: list[dict] = []

    def _keep_cookies(self, response) -> None:
        from http.cookies import SimpleCookie

        for header in response.raw.headers.getlist("Set-Cookie"):
            for name, morsel in SimpleCookie(header).items():
                if morsel.value and morsel["max-age"] not in ("0", 0):
                    self.cookies[name] = morsel.value
                else:
                    self.cookies.pop(name, None)
        self.http.session.cookies.clear()

    def request(self, method: str, path: str, form: dict | None = None) -> Answer | None:
        """One admin request with the approver's cookies, following redirects by hand; ``None`` if unanswered."""
        attempts = 0  # of the first request: a POST retried may have been applied by an earlier attempt
        for _ in range(10):
            headers = {
                "Cookie": "; ".join(f"{name}={value}" for name, value in self.cookies.items()),
                "Referer": self.config["base_url"] + path,
            }
            data = None if form is None else {**form, "csrfmiddlewaretoken": self.cookies.get("csrftoken", "")}
            answer = self.http.call(method, path, data=data, headers=headers, on_response=self._keep_cookies)
            if answer is None:
                return None
            attempts = attempts or answer.attempts
            if answer.status not in (301, 302, 303):
                answer.attempts = attempts
                return answer
            method, form, path = "GET", None, answer.location.removeprefix(self.config["base_url"])
        raise RuntimeError(f"too many redirects from {path}")

    def _get(self, path: str) -> Answer:
        for _ in range(3):
            answer = self.request("GET", path)
            if answer is not None:
                return answer
        raise RuntimeError(f"no answer to GET {path} for {3 * RETRY_WINDOW} s")

    def _post_form(self, path: str, form: dict) -> Answer | None:
        return self.request("POST", path, form)

    def _is_queue(self, answer: Answer) -> bool:
        return isinstance(answer.body, str) and 'id="changelist"' in answer.body

    def sign_in(self) -> None:
        """Log in to the admin, enrol (the first time) and confirm the TOTP second factor."""
        from django_otp.oath import totp

        for _ in range(20):
            page = self._get(self.admin + self.QUEUE)
            if self._is_queue(page):
                self.stats["admin_sign_ins"] += 1
                return
            if 'name="password"' in page.body:
                self._post_form(
                    self.admin + "login/",
                    {
                        "username": self.user["username"],
                        "password": self.user["password"],
                        "next": self.admin + self.QUEUE,
                    },
                )
                continue
            if 'name="token"' not in page.body:
                raise RuntimeError(f"unexpected admin page: {page.status} {page.body[:300]}")
            found = re.search(r'id="totp-secret"[^>]*>([A-Z2-7]+=*)<', page.body)  # base32, as the page shows it
            if found:
                self.totp_key = found.group(1)
            if self.totp_key is None:
                raise RuntimeError("the second factor is enrolled, but its key was never shown to this approver")
            step = int(time.time()) // 30
            if step == self.last_step:  # a code is accepted once: wait for the next one
                time.sleep(30 - time.time() % 30 + 0.2)
                step = int(time.time()) // 30
            self.last_step = step
            code = f"{totp(base64.b32decode(self.totp_key), step=30, t0=0, digits=6):06d}"
            self._post_form(self.admin + "second-factor/?next=" + self.admin + self.QUEUE, {"token": code})
        raise RuntimeError("could not sign in to the back office")

    def queue(self) -> list[int]:
        """The withdrawal ids the approval queue lists."""
        while True:
            page = self._get(self.admin + self.QUEUE)
            if self._is_queue(page):
                pattern = re.escape(self.admin + self.QUEUE) + r"(\d+)/change/"
                return sorted({int(found) for found in re.findall(pattern, page.body)})
            self.sign_in()

    def decide(self, withdrawal_id: int) -> None:
        """Approve (most) or reject one withdrawal through the admin; read the outcome from the message."""
        decision = self.rng.choices(["approve", "reject"], [7, 3])[0]
        path = f"{self.admin}{self.QUEUE}{withdrawal_id}/decide/"
        form = {"decision": decision, "reason": "soak: rejected by the approver" if decision == "reject" else ""}
        answer = self._post_form(path, form)
        done = f"Withdrawal #{withdrawal_id} {'approved' if decision == 'approve' else 'rejected'}."
        code = ""
        if answer is None or not answer.ok:
            outcome, code = ("unknown", "") if answer is None else ("refused", answer.code)
            if answer is not None:
                self.anomalies.append(f"decision on withdrawal {withdrawal_id} answered {answer.status}")
        elif not self._is_queue(answer):
            outcome = "unknown"  # the session was lost: sign in again, decide again later
            self.sign_in()
        elif done in answer.body:
            outcome = "acknowledged"
        else:
            failed = re.search(rf"Withdrawal #{withdrawal_id}: ([^<]*)<", answer.body)
            outcome, code = "refused", "invalid_state"
            if failed is None or "cannot become" not in failed.group(1):
                self.anomalies.append(f"decision on withdrawal {withdrawal_id}: {failed and failed.group(1)}")
            elif answer.attempts > 1:
                outcome = "unknown"  # our own earlier attempt may have applied it
        self.outcomes.count("decision", outcome, code)
        self.decisions.append({"withdrawal_id": withdrawal_id, "decision": decision, "outcome": outcome})

    def run(self) -> None:
        """Decide the queue until asked to stop; then, once the traders are done, until it is empty."""
        self.sign_in()
        while True:
            drained = (self.work_dir / "traders-done").exists()
            waiting = self.queue()
            if not waiting and drained:
                return
            for withdrawal_id in waiting:
                self.decide(withdrawal_id)
            time.sleep(0.2 if drained else self.rng.uniform(0.3, 1.0))

    def result(self) -> dict:
        """The approver's record: each decision and its outcome."""
        return {**super().result(), "user": self.user["username"], "decisions": self.decisions}


def client_main(role: str, index: int, config_path: Path) -> int:
    """Entry point of a client process: run the role, then write its record next to the configuration."""
    config = json.loads(config_path.read_text())
    import django

    django.setup()
    client = Trader(config, index) if role == "trader" else Approver(config, index)
    failure = None
    try:
        client.run()
    except Exception as exc:  # recorded: the orchestrator reports a client that failed
        failure = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        record = {**client.result(), "failure": failure}
        out = config_path.parent / f"{role}-{index}.json"
        out.with_suffix(".tmp").write_text(json.dumps(record, default=str))
        out.with_suffix(".tmp").rename(out)
    return 0


# Setting up ----------------------------------------------------------------------------------------


def prepare(*, traders: int, seed: str) -> dict:
    """Migrate the scratch database and create assets, markets, traders and an approver. No money moves here:
    the traders fund themselves by deposits through the webhook."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from django_otp.plugins.otp_totp.models import TOTPDevice

    from apps.demo.seed import seed_withdrawal_addresses
    from apps.ledger.models import Asset
    from apps.orders.services import market_create
    from apps.wallets.custody.simnet import new_address

    call_command("migrate", verbosity=0)
    assets = {}
    for code, decimals, fee, minimum, auto, daily in ASSETS:
        assets[code] = Asset.objects.create(
            code=code,
            name=code,
            decimals=decimals,
            network="simnet",
            confirmations_required=SIMULATOR_CONFIRMATIONS,
            withdrawal_fee=fee,
            min_withdrawal=minimum,
            withdrawal_auto_approve_limit=auto,
            withdrawal_daily_limit=daily,
        )
    markets = []
    for base, quote, mid, tick, step, min_qty, max_qty, min_notional in MARKETS:
        market = market_create(
            base=assets[base],
            quote=assets[quote],
            tick_size=tick,
            step_size=step,
            min_qty=min_qty,
            max_qty=max_qty,
            min_notional=min_notional,
        )
        min_steps = max(int(min_qty / step), int(min_notional / (mid * step)) + 1)
        markets.append(
            {
                "symbol": market.symbol,
                "mid": str(mid),
                "tick": str(tick),
                "step": str(step),
                "min_steps": min_steps,
                "max_steps": min_steps * 60,
            }
        )
    User = get_user_model()
    trader_list = []
    for n in range(traders):
        password = secrets.token_urlsafe(16)
        user = User.objects.create_user(
            username=f"soak-trader-{n}", email=f"soak-trader-{n}@example.com", password=password
        )
        device = TOTPDevice.objects.create(user=user, name="soak", confirmed=True)  # withdraw keys need it
        book = {code: [new_address() for _ in range(WITHDRAWAL_ADDRESSES)] for code in WITHDRAWAL_ASSETS}
        for code, addresses in book.items():  # active at once: the address book's e-mail links are not soaked
            seed_withdrawal_addresses(user_id=user.id, asset=assets[code], addresses=addresses, label="soak")
        trader_list.append(
            {"username": user.username, "password": password, "otp_key": device.key, "withdrawal_addresses": book}
        )
    approver_password = secrets.token_urlsafe(16)
    approver = User.objects.create_user(username="soak-approver", password=approver_password, is_staff=True)
    approver.groups.add(*Group.objects.filter(name__in=["operators", "approvers"]))
    return {
        "seed": seed,
        "traders": trader_list,
        "approver": {"username": approver.username, "password": approver_password},
        "markets": markets,
        "assets": {
            code: {
                "decimals": asset.decimals,
                "min_withdrawal": str(asset.min_withdrawal),
                "auto_approve": str(asset.withdrawal_auto_approve_limit),
            }
            for code, asset in assets.items()
        },
    }


def forget_queue(redis_url: str, queue: str) -> None:
    """Delete the soak's Celery queue, its binding and the unacknowledged messages killed workers left."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        client.delete(
            queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}", *client.keys(f"{queue}\x06\x16*")
        )
        for tag, raw in client.hgetall("unacked").items():
            try:
                if json.loads(raw)[-1] == queue:  # [message, exchange, routing key]
                    client.hdel("unacked", tag)
                    client.zrem("unacked_index", tag)
            except (ValueError, IndexError, TypeError):
                continue
    finally:
        client.close()


def wait_for(predicate, what: str, timeout: float, interval: float = 0.5):
    """Poll ``predicate`` until it returns something truthy (returned); raise ``TimeoutError`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# The run -------------------------------------------------------------------------------------------


class Soak:
    """The orchestrator: services, clients, faults, drain and checks."""

    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.run_id = secrets.token_hex(4)
        self.faults: Counter = Counter()
        self.backends_terminated = 0
        self.fault_errors: list[str] = []
        self.problems: list[str] = []

    def environment(self, base_url: str, port: int) -> dict:
        """The services' environment: production settings (soak variant), the scratch database, our queue."""
        return {
            **os.environ,
            "DATABASE_URL": with_database(self.admin_url, self.database),
            "DJANGO_SETTINGS_MODULE": "exchange.settings.soak",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_ADMIN_URL": "admin/",
            "DJANGO_SECURE_SSL_REDIRECT": "false",
            "CUSTODY_WEBHOOK_SECRET": self.webhook_secret,
            "API_SECRET_ENCRYPTION_KEY": secrets.token_urlsafe(32),
            "CUSTODY_CALLBACK_URL": f"{base_url}/custody/callbacks/",
            "CUSTODY_SIMULATOR_CONFIRMATIONS": str(SIMULATOR_CONFIRMATIONS),
            "CUSTODY_SIMULATOR_DELAY": "0.5",
            "CUSTODY_SIMULATOR_FAILURE_RATE": "0.1",
            "CUSTODY_SIMULATOR_NETWORK_FEES": ",".join(f"{k}={v}" for k, v in NETWORK_FEES.items()),
            "CUSTODY_SIMULATOR_HTTP_TIMEOUT": "5",
            "CELERY_TASK_DEFAULT_QUEUE": self.queue,
            # Blocks and snapshots are signed; the sealer (beat) runs every 2 seconds.
            "LEDGER_SIGNING_KEY": self.signing_key,
            "LEDGER_SEAL_INTERVAL": "2",
            "STREAMS_CHANNEL_PREFIX": self.queue,
            "WALLETS_SWEEP_AFTER": "10",
            "WALLETS_SWEEP_INTERVAL": "3",
            # Each custody event's transaction stays open 0.1 s, so that a worker killed is often killed mid-task
            # (without it the sweeps are never needed: tasks take milliseconds).
            "WALLETS_EVENT_PROCESSING_DELAY": "0.1",
            "API_RATE_PER_IP": "1000000/min",
            "API_RATE_PER_KEY": "1000000/min",
            "API_RATE_LOGIN": "1000/min",
            "LOG_LEVEL": "WARNING",
            "LOG_FORMAT": "text",
            "PYTHONUNBUFFERED": "1",
            "WEB_PORT": str(port),
        }

    def main(self) -> int:
        """Run the soak; print the figures; return the exit status."""
        if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
            from devtools.localservices import service_env

            os.environ.update(service_env())
        import psycopg

        self.admin_url = os.environ["DATABASE_URL"]
        self.redis_url = os.environ["REDIS_URL"]
        self.database = f"soak_{os.getpid()}_{self.run_id}"
        self.queue = f"soak-{self.run_id}"
        self.webhook_secret = secrets.token_hex(32)
        self.signing_key = secrets.token_hex(32)  # an Ed25519 private key is any 32 bytes (RFC 8032)
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        self.work_dir = Path(tempfile.mkdtemp(prefix=f"soak-{self.run_id}-"))
        env = self.environment(base_url, port)
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.database}"')
        os.environ.update({k: v for k, v in env.items() if k not in ("PYTHONUNBUFFERED",)})
        self.processes = Processes(env, self.work_dir)
        started = time.monotonic()
        figures: dict = {}
        left: list[str] = []
        interrupted = False
        try:
            figures = self.soak(base_url, port)
        except BaseException as exc:
            if not isinstance(exc, Exception):  # interrupted (Ctrl-C, SIGTERM): clean up, keep nothing
                interrupted = True
                raise
            self.problems.append(f"the soak failed: {type(exc).__name__}: {exc}")
            for process in self.processes.started:
                if not process.alive() and process.popen.returncode not in (0, -signal.SIGKILL, -signal.SIGTERM):
                    self.problems.append(f"{process.name} exited {process.popen.returncode}: {process.log_tail(1500)}")
        finally:
            self.processes.stop_all()
            left = self.processes.left_running()
            from django.apps import apps

            if apps.ready:
                from django.db import connections

                connections.close_all()
            with psycopg.connect(self.admin_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            forget_queue(self.redis_url, self.queue)
            if interrupted:
                shutil.rmtree(self.work_dir, ignore_errors=True)
        lost = figures.get("lost", [])
        failed_checks = [check["name"] for check in figures.get("checks", []) if not check["ok"]]
        ok = not lost and not failed_checks and not left and not self.problems and bool(figures)
        emit(
            "result",
            ok=ok,
            lost=len(lost),
            lost_details=lost[:50],
            failed_checks=failed_checks,
            problems=self.problems[:20],
            left_running=left,
            seconds=round(time.monotonic() - started, 1),
            logs=str(self.work_dir) if not ok or self.args.keep_logs else None,
        )
        if ok and not self.args.keep_logs:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        return 0 if ok else 1

    # Phases -------------------------------------------------------------------------------------

    def soak(self, base_url: str, port: int) -> dict:
        """Set up, start, drive with faults, drain, check; return the figures."""
        import django

        django.setup()
        config = prepare(traders=self.args.traders, seed=str(self.args.seed))
        config.update(
            base_url=base_url,
            admin_url="admin/",
            run=self.run_id,
            work_dir=str(self.work_dir),
            webhook_secret=self.webhook_secret,
        )
        config_path = self.work_dir / "config.json"
        config_path.write_text(json.dumps(config))
        from django.db import connections

        connections.close_all()

        web = Web(self.processes, port)
        web.start()
        streams = self.streams = Streams(self.processes, free_port())
        streams.start()
        workers = WorkerPool(self.processes, self.queue, self.args.workers, self.run_id)
        workers.replenish()
        beat = self.processes.start(
            "beat",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "exchange",
                "beat",
                "--schedule",
                str(self.work_dir / "beat-schedule"),
                "--loglevel",
                "WARNING",
            ],
        )
        custody = self.processes.start(
            "custody", [sys.executable, "manage.py", "run_custody_simulator", "--interval", "0.5"]
        )
        wait_for(web.healthy, "the web server, database, Redis and a worker (/healthz)", START_TIMEOUT)
        from apps.orders.models import Market

        streams.follow(list(Market.objects.values_list("symbol", flat=True)), base_url)

        me = [sys.executable, str(Path(__file__).resolve())]
        records: dict[Process, Path] = {}
        for role, index in [*(("trader", n) for n in range(self.args.traders)), ("approver", 0)]:
            process = self.processes.start(
                f"{role}-{index}", [*me, "--client", role, "--index", str(index), "--config", str(config_path)]
            )
            records[process] = self.work_dir / f"{role}-{index}.json"
        clients = list(records)
        traders, approver = clients[:-1], clients[-1]

        def funded() -> bool:
            dead = [client for client in clients if not client.alive()]
            if dead:
                raise RuntimeError(f"client {dead[0].name} exited early:\n{dead[0].log_tail()}")
            return all((self.work_dir / f"ready-trader-{n}").exists() for n in range(len(traders)))

        wait_for(funded, "the traders to log in and fund themselves", START_TIMEOUT)
        began = time.monotonic()
        self.inject_faults(web, workers, clients, until=began + self.args.duration)
        (self.work_dir / "stop").touch()
        driven = time.monotonic() - began

        # Drain: the traders finish their operation in flight, the services come back whole, the
        # approver empties the queue, the workers and the provider finish what is in flight.
        self.ensure_services(web, workers, beat, custody)
        for trader in traders:
            self.wait_exit(trader, RETRY_WINDOW + 60)
        (self.work_dir / "traders-done").touch()
        self.ensure_services(web, workers, beat, custody)
        self.wait_exit(approver, self.args.drain_timeout)
        drained = self.wait_drained(self.args.drain_timeout)
        stream_books = self.check_stream_books(base_url)
        streams.stop()
        for process in [beat, custody, *workers.workers, web.process, streams.web, streams.relay]:
            process.stop()

        results = []
        for process, path in records.items():
            if not path.is_file():
                self.problems.append(
                    f"{process.name} left no record (exit {process.popen.returncode}): {process.log_tail(1500)}"
                )
                continue
            result = json.loads(path.read_text())
            if result.get("failure"):
                self.problems.append(f"{process.name} failed: {result['failure']}")
            results.append(result)

        operations = self.operations(results)
        emit(
            "operations",
            seconds_driven=round(driven, 1),
            traders=self.args.traders,
            workers=self.args.workers,
            web=f"gunicorn {WEB_WORKERS} workers x {WEB_THREADS} threads",
            **operations,
        )
        emit(
            "faults",
            injected=dict(self.faults),
            total=sum(self.faults.values()),
            db_backends_terminated=self.backends_terminated,
            answers_dropped_by_clients=operations["http"].get("answers_dropped", 0),
            errors=self.fault_errors[:10],
        )
        checks, lost = Checks(results, config).run()
        checks.append(stream_books)
        if not drained:
            checks.insert(0, {"name": "drained", "ok": False, "checked": 1, "problems": [self.drain_state]})
        for check in checks:
            emit("check", **check)
        return {"checks": checks, "lost": lost}

    def inject_faults(self, web: Web, workers: WorkerPool, clients: list[Process], *, until: float) -> None:
        """Inject faults until ``until`` and until every kind happened once; stop early if a client dies."""
        pending: list[str] = []
        while True:
            pause = self.rng.uniform(0.5, 1.5) * self.args.fault_interval
            deadline = time.monotonic() + pause
            while time.monotonic() < deadline:
                dead = [client for client in clients if not client.alive()]
                if dead:
                    raise RuntimeError(f"client {dead[0].name} exited early:\n{dead[0].log_tail()}")
                time.sleep(0.2)
            if time.monotonic() >= until and set(FAULT_KINDS) <= set(self.faults):
                return
            if not pending:
                pending = self.rng.sample(FAULT_KINDS, len(FAULT_KINDS))
            kind = pending.pop()
            try:
                self.inject(kind, web, workers)
            except Exception as exc:  # a fault that could not be injected is reported, not fatal
                self.fault_errors.append(f"{kind}: {type(exc).__name__}: {exc}")

    def inject(self, kind: str, web: Web, workers: WorkerPool) -> None:
        """Inject one fault of ``kind``."""
        if kind == "worker_killed":
            workers.kill_worker(self.rng)
        elif kind == "worker_process_killed":
            if not workers.kill_pool_process(self.rng):
                return
        elif kind == "db_connections_terminated":
            self.backends_terminated += terminate_backends(self.admin_url, self.database)
        elif kind == "web_killed":
            web.restart(kill=True)
        elif kind == "web_restarted":
            web.restart(kill=False)
        elif kind == "relay_killed":
            self.streams.kill_relay()
        self.faults[kind] += 1

    def ensure_services(self, web: Web, workers: WorkerPool, beat: Process, custody: Process) -> None:
        """Every service is running again after the faults (a process that died on its own is a problem)."""
        for process in (beat, custody):
            if not process.alive():
                raise RuntimeError(f"{process.name} died:\n{process.log_tail()}")
        if not web.process.alive():
            raise RuntimeError(f"the web server died:\n{web.process.log_tail()}")
        if not self.streams.alive():
            raise RuntimeError(f"the streams died:\n{self.streams.web.log_tail()}{self.streams.relay.log_tail()}")
        workers.replenish()
        wait_for(web.healthy, "the services to be healthy after the faults", START_TIMEOUT)

    def check_stream_books(self, base_url: str) -> dict:
        """Each market's book kept from its depth stream through the faults equals its REST depth at the end."""
        import requests

        problems = []
        for symbol in sorted(self.streams.books) or ["(none)"]:
            deadline = time.monotonic() + 30
            depth = requests.get(f"{base_url}/api/v1/markets/{symbol}/depth/?limit=1000", timeout=10).json()
            book = self.streams.books.get(symbol)
            while book is not None and book.last_update_id < depth["last_update_id"] and time.monotonic() < deadline:
                time.sleep(0.2)
                book = self.streams.books.get(symbol)
            rest = (
                [[Decimal(p), Decimal(q)] for p, q in depth["bids"]],
                [[Decimal(p), Decimal(q)] for p, q in depth["asks"]],
            )
            if book is None or book.last_update_id != depth["last_update_id"] or book.levels() != rest:
                where = None if book is None else book.last_update_id
                problems.append(f"{symbol}: stream book at {where}, REST depth at {depth['last_update_id']} differs")
        return {
            "name": "stream_books",
            "ok": not problems and bool(self.streams.books),
            "checked": len(self.streams.books),
            "lost": 0,
            "problems": problems,
            "resyncs": dict(self.streams.resyncs),
        }

    def wait_exit(self, process: Process, timeout: float) -> None:
        """Wait for a client to finish; a client that does not is stopped and reported."""
        try:
            process.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.problems.append(f"{process.name} did not finish within {timeout:.0f} s")
            process.stop()

    def wait_drained(self, timeout: float) -> bool:
        """Wait (bounded) until the inbox is processed, every provider callback delivered, no withdrawal in
        flight and every journal entry sealed (by beat's sealer), twice in a row; return whether it happened
        (``drain_state`` says what is left)."""
        from django.db import DatabaseError, close_old_connections

        from apps.ledger.models import JournalEntry
        from apps.streams.models import StreamEvent
        from apps.wallets.custody.simulator.models import SimCallback
        from apps.wallets.models import WITHDRAWAL_PENDING, CustodyEvent, EventState, Withdrawal

        settled = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            close_old_connections()
            try:
                state = {
                    "events_unprocessed": CustodyEvent.objects.filter(state=EventState.RECEIVED).count(),
                    "callbacks_undelivered": SimCallback.objects.filter(delivered_at__isnull=True).count(),
                    "stream_events_unpublished": StreamEvent.objects.count(),
                    "withdrawals_in_flight": dict(
                        Counter(
                            Withdrawal.objects.filter(status__in=WITHDRAWAL_PENDING).values_list("status", flat=True)
                        )
                    ),
                    "entries_unsealed": JournalEntry.objects.filter(seal__isnull=True).count(),
                }
            except DatabaseError as exc:
                state = {"error": str(exc)}
            self.drain_state = f"not drained: {state}"
            settled = (
                settled + 1
                if state
                == {
                    "events_unprocessed": 0,
                    "callbacks_undelivered": 0,
                    "withdrawals_in_flight": {},
                    "entries_unsealed": 0,
                    "stream_events_unpublished": 0,
                }
                else 0
            )
            if settled >= 2:
                return True
            time.sleep(1)
        return False

    @staticmethod
    def operations(records: list[dict]) -> dict:
        """Operations per kind over every client, and the HTTP figures."""
        totals = {name: Counter() for name in ("attempted", "acknowledged", "refused", "unknown", "refusal_codes")}
        http: Counter = Counter()
        for record in records:
            for name, counts in record["outcomes"].items():
                totals[name].update(counts)
            http.update(record["http"])
        return {**{name: dict(sorted(counts.items())) for name, counts in totals.items()}, "http": dict(http)}


# Checks --------------------------------------------------------------------------------------------


class Checks:
    """Read the outcome from the database and compare it with what the clients were told."""

    def __init__(self, records: list[dict], config: dict):
        self.records, self.config = records, config
        self.traders = [record for record in records if record["role"] == "trader"]
        self.approvers = [record for record in records if record["role"] == "approver"]
        self.lost: list[str] = []

    def run(self) -> tuple[list[dict], list[str]]:
        """Every check as ``{"name", "ok", "checked", "problems"}``, and what was lost."""
        from django.db import close_old_connections, connections

        connections.close_all()
        close_old_connections()
        checks = []
        for name in (
            "reconcile",
            "journal",
            "client_anomalies",
            "inbox",
            "callbacks",
            "deposits",
            "forged_callbacks",
            "orders",
            "order_holds",
            "withdrawals",
        ):
            problems: list[str] = []
            lost: list[str] = []
            checked = getattr(self, f"check_{name}")(problems, lost)
            self.lost.extend(lost)
            checks.append(
                {
                    "name": name,
                    "ok": not problems and not lost,
                    "checked": checked,
                    "lost": len(lost),
                    "problems": (lost + problems)[:20],
                }
            )
        return checks, self.lost

    def user_ids(self) -> dict[str, int]:
        """The traders' user ids by username."""
        from django.contrib.auth import get_user_model

        names = [record["user"] for record in self.traders]
        return dict(get_user_model().objects.filter(username__in=names).values_list("username", "id"))

    def check_reconcile(self, problems, lost) -> int:
        """``reconcile()``: every invariant of DESIGN.md section 5."""
        from apps.ledger.reconciliation import reconcile

        report = reconcile()
        for check in report.checks:
            if not check.ok:
                problems.append(f"invariant {check.invariant} {check.name}: {check.details[:3]}")
        return len(report.checks)

    def check_journal(self, problems, lost) -> int:
        """Every entry is sealed (by the sealer beat ran, not by this check) and the chain verifies."""
        from apps.ledger.models import JournalEntry
        from apps.ledger.seal.verification import journal_verify

        unsealed = JournalEntry.objects.filter(seal__isnull=True).count()
        if unsealed:
            problems.append(f"{unsealed} entries are in no block")
        result = journal_verify()
        if not result.ok:
            problems.append(f"journal_verify: {result.as_dict()['discrepancy']}")
        return result.entries

    def check_client_anomalies(self, problems, lost) -> int:
        """Answers no correct server gives (an idempotency conflict on a retry, a forged callback accepted...)."""
        for record in self.records:
            problems.extend(f"{record['role']}-{record['index']}: {anomaly}" for anomaly in record["anomalies"])
        return len(self.records)

    def check_inbox(self, problems, lost) -> int:
        """Every stored callback was processed; none was rejected as contradictory."""
        from apps.wallets.models import CustodyEvent, EventState

        states = Counter(CustodyEvent.objects.values_list("state", flat=True))
        if states.get(EventState.RECEIVED):
            problems.append(f"{states[EventState.RECEIVED]} custody events still unprocessed")
        for event in CustodyEvent.objects.filter(state=EventState.REJECTED)[:10]:
            problems.append(f"custody event {event.event_id} rejected: {event.error}")
        return sum(states.values())

    def check_callbacks(self, problems, lost) -> int:
        """Every callback answered 200 (by a client, or by the provider's own delivery) is in the inbox, processed."""
        from apps.wallets.custody.simulator.models import SimCallback
        from apps.wallets.models import CustodyEvent, EventState

        answered = {
            callback["event_id"]
            for record in self.traders
            for callback in record["callbacks"]
            if 200 in callback["answers"]
        }
        answered |= set(SimCallback.objects.filter(delivered_at__isnull=False).values_list("event_id", flat=True))
        stored = dict(CustodyEvent.objects.filter(event_id__in=answered).values_list("event_id", "state"))
        for event_id in sorted(answered):
            if event_id not in stored:
                lost.append(f"callback {event_id} was answered 200 but is not in the inbox")
            elif stored[event_id] != EventState.PROCESSED:
                lost.append(f"callback {event_id} was answered 200 but is {stored[event_id]}")
        return len(answered)

    def check_deposits(self, problems, lost) -> int:
        """Each deposit the provider confirmed is credited exactly once, with its amount, to the address's
        owner; nothing else is credited."""
        from apps.ledger.models import AccountKind, JournalEntry, Posting
        from apps.wallets.custody.simulator.models import SimDeposit
        from apps.wallets.models import Deposit, DepositAddress, DepositStatus

        owners = dict(DepositAddress.objects.values_list("address", "user_id"))
        confirmed = {(d.network, d.txid, d.vout): d for d in SimDeposit.objects.filter(status="confirmed")}
        credited = {
            (d.network, d.txid, d.vout): d
            for d in Deposit.objects.filter(status=DepositStatus.CREDITED).select_related("address")
        }
        sent_by_clients = {
            (deposit["txid"], deposit["vout"]) for record in self.traders for deposit in record["deposits"]
        }
        for key, sim in confirmed.items():
            deposit = credited.get(key)
            if deposit is None:
                lost.append(f"deposit {key[1]}:{key[2]} confirmed by custody but not credited")
                continue
            if deposit.amount != sim.amount or deposit.user_id != owners.get(sim.address):
                lost.append(
                    f"deposit {key[1]}: credited {deposit.amount} to user {deposit.user_id}, custody says "
                    f"{sim.amount} to {owners.get(sim.address)}"
                )
            entries = list(JournalEntry.objects.filter(idempotency_key=f"deposit:{key[0]}:{key[1]}:{key[2]}"))
            if len(entries) != 1:
                lost.append(f"deposit {key[1]}: {len(entries)} credit entries")
                continue
            credit = (
                Posting.objects.filter(entry=entries[0], account__kind=AccountKind.USER_AVAILABLE)
                .values_list("account__owner_id", "amount")
                .first()
            )
            if credit is None or credit[0] != deposit.user_id or -credit[1] != sim.amount:
                lost.append(
                    f"deposit {key[1]}: the credit posting is {credit}, expected {sim.amount} to user {deposit.user_id}"
                )
        for key in credited.keys() - confirmed.keys():
            lost.append(f"deposit {key[1]}:{key[2]} credited but custody never confirmed it")
        for txid, vout in sent_by_clients:
            if not any(key[1:] == (txid, vout) for key in confirmed):
                problems.append(f"deposit {txid}:{vout} the clients sent is not confirmed at custody")
        entries = JournalEntry.objects.filter(reason="deposit").count()
        if entries != len(credited):
            lost.append(f"{entries} deposit entries for {len(credited)} credited deposits")
        return len(confirmed)

    def check_forged_callbacks(self, problems, lost) -> int:
        """Forged callbacks left no trace: no inbox event, no deposit; a tampered body did not change the event."""
        from apps.wallets.models import CustodyEvent, Deposit

        forged = [item for record in self.traders for item in record["forged"]]
        for item in forged:
            if item["kind"] == "tampered_body":
                event = CustodyEvent.objects.filter(event_id=item["event_id"]).first()
                if event is not None and amount_text(event.amount) == item["amount"]:
                    lost.append(f"a tampered callback changed event {item['event_id']}")
                continue
            if CustodyEvent.objects.filter(event_id=item["event_id"]).exists():
                lost.append(f"forged callback {item['event_id']} ({item['kind']}) was stored")
            if Deposit.objects.filter(txid=item["txid"]).exists():
                lost.append(f"forged deposit {item['txid']} ({item['kind']}) was recorded")
        return len(forged)

    def check_orders(self, problems, lost) -> int:
        """Acknowledged orders exist with their terms, in a state consistent with what the API said; each
        client_order_id applied at most once; no order exists that the clients did not ask for."""
        from django.db.models import Sum

        from apps.ledger.models import JournalEntry
        from apps.orders.models import ENDED_STATUSES, Order, Trade

        users = self.user_ids()
        checked = 0
        for record in self.traders:
            user_id = users[record["user"]]
            mine = {
                order.client_order_id: order for order in Order.objects.filter(user_id=user_id).select_related("market")
            }
            asked = {order["client_order_id"]: order for order in record["orders"]}
            for client_order_id in mine.keys() - asked.keys():
                lost.append(f"order {mine[client_order_id].id} ({client_order_id!r}) that no request accounts for")
            cancelled = {cancel["id"] for cancel in record["order_cancels"] if cancel["outcome"] == "acknowledged"}
            for client_order_id, request in asked.items():
                order = mine.get(client_order_id)
                if request["outcome"] == "refused" and order is not None:
                    lost.append(f"order {client_order_id} was refused ({request.get('code')}) but exists")
                if request["outcome"] != "acknowledged":
                    continue
                checked += 1
                if order is None or order.id != request["id"]:
                    lost.append(f"acknowledged order {request['id']} ({client_order_id}) is missing")
                    continue
                body = request["request"]
                terms = {"market": order.market.symbol, "side": order.side, "type": order.type}
                for field in ("price", "qty", "quote_qty"):
                    value = getattr(order, field)
                    terms[field] = None if value is None else amount_text(value)
                for field, value in terms.items():
                    if body.get(field) is not None and str(body[field]) != value:
                        lost.append(f"order {order.id}: {field} is {value}, the request said {body[field]}")
                said = request["status"]
                if said not in ("open", "partially_filled") and order.status != said:
                    lost.append(f"order {order.id} was acknowledged {said} and is now {order.status}")
                if D(order.filled_qty) < D(request["filled_qty"]):
                    lost.append(f"order {order.id}: filled {order.filled_qty} < acknowledged {request['filled_qty']}")
                if order.id in cancelled and order.status != "cancelled":
                    lost.append(f"order {order.id}: its cancel was acknowledged but it is {order.status}")
        fills: Counter = Counter()
        for side in ("taker_order", "maker_order"):
            for order_id, qty in Trade.objects.values(side).annotate(q=Sum("qty")).values_list(side, "q"):
                fills[order_id] += qty
        entries = Counter(
            JournalEntry.objects.filter(idempotency_key__startswith="order:").values_list("idempotency_key", flat=True)
        )
        for order in Order.objects.filter(user_id__in=users.values()):
            if fills[order.id] != order.filled_qty:
                problems.append(f"order {order.id}: trades fill {fills[order.id]}, the order says {order.filled_qty}")
            holds = entries[f"order:{order.id}:hold"]
            if holds != (1 if order.held_amount else 0):
                problems.append(f"order {order.id}: {holds} hold entries")
            release = entries[f"order:{order.id}:release"]
            if release > 1 or (release and order.status not in ENDED_STATUSES):
                problems.append(f"order {order.id} ({order.status}): {release} release entries")
        return checked

    def check_order_holds(self, problems, lost) -> int:
        """No ended order holds anything; every open order holds something."""
        from apps.orders.models import ENDED_STATUSES, OPEN_STATUSES, Order

        for order in Order.objects.filter(status__in=ENDED_STATUSES).exclude(held_remaining=0)[:20]:
            problems.append(f"order {order.id} is {order.status} and still holds {order.held_remaining}")
        for order in Order.objects.filter(status__in=OPEN_STATUSES, held_remaining=0)[:20]:
            problems.append(f"order {order.id} is {order.status} and holds nothing")
        return Order.objects.count()

    def check_withdrawals(self, problems, lost) -> int:
        """Acknowledged withdrawals exist with their terms and are final as the decisions and cancels say, matching
        custody's books and the ledger; no request was applied twice, and none that was refused or never made.

        Every request names a fresh address, so a withdrawal is matched to its request by its address."""
        from apps.ledger.models import JournalEntry
        from apps.wallets.custody.simulator.models import SimWithdrawal
        from apps.wallets.models import WITHDRAWAL_RELEASED, Withdrawal, WithdrawalStatus

        users = self.user_ids()
        decided = {}
        for record in self.approvers:
            for decision in record["decisions"]:
                if decision["outcome"] == "acknowledged":
                    decided[decision["withdrawal_id"]] = decision["decision"]
        checked = 0
        for record in self.traders:
            mine = list(Withdrawal.objects.filter(user_id=users[record["user"]]).select_related("asset"))
            by_address = {}
            for withdrawal in mine:
                by_address.setdefault(withdrawal.address, []).append(withdrawal)
            requests = {request["request"]["address"]: request for request in record["withdrawals"]}
            for address, found in by_address.items():
                request = requests.get(address)
                if request is None:
                    lost.append(f"withdrawal {found[0].id} that no request accounts for")
                elif len(found) > 1:
                    lost.append(
                        f"withdrawal request {request['key']} applied {len(found)} times: {[w.id for w in found]}"
                    )
                elif request["outcome"] == "refused":
                    lost.append(
                        f"withdrawal request {request['key']} was refused ({request.get('code')}) "
                        f"but applied as {found[0].id}"
                    )
            cancelled = {c["id"] for c in record["withdrawal_cancels"] if c["outcome"] == "acknowledged"}
            for address, request in requests.items():
                if request["outcome"] != "acknowledged":
                    continue
                checked += 1
                found = by_address.get(address, [])
                withdrawal = found[0] if len(found) == 1 else None
                if withdrawal is None or withdrawal.id != request["id"]:
                    lost.append(f"acknowledged withdrawal {request['id']} ({request['key']}) is not there as such")
                    continue
                body = request["request"]
                if (withdrawal.asset.code, amount_text(withdrawal.amount)) != (body["asset"], body["amount"]):
                    lost.append(f"withdrawal {withdrawal.id}: terms differ from the request")
                if withdrawal.id in cancelled and withdrawal.status != WithdrawalStatus.CANCELLED:
                    lost.append(f"withdrawal {withdrawal.id}: cancel acknowledged, yet it is {withdrawal.status}")
                decision = decided.get(withdrawal.id)
                if decision == "approve" and withdrawal.status not in ("completed", "failed"):
                    lost.append(f"withdrawal {withdrawal.id}: approved but {withdrawal.status}")
                if decision == "reject" and withdrawal.status != WithdrawalStatus.REJECTED:
                    lost.append(f"withdrawal {withdrawal.id}: rejected but {withdrawal.status}")
            for withdrawal in mine:
                self._withdrawal_books(withdrawal, problems, lost, SimWithdrawal, JournalEntry, WITHDRAWAL_RELEASED)
        return checked

    @staticmethod
    def _withdrawal_books(withdrawal, problems, lost, SimWithdrawal, JournalEntry, released) -> None:
        """A withdrawal is final, and custody's books and the ledger's entries agree with its state."""
        keys = Counter(
            JournalEntry.objects.filter(idempotency_key__startswith=f"withdrawal:{withdrawal.id}:").values_list(
                "idempotency_key", flat=True
            )
        )
        sent = SimWithdrawal.objects.filter(client_reference=str(withdrawal.id)).first()
        name = f"withdrawal {withdrawal.id} ({withdrawal.status})"
        if keys[f"withdrawal:{withdrawal.id}:hold"] != 1:
            problems.append(f"{name}: {keys[f'withdrawal:{withdrawal.id}:hold']} hold entries")
        if withdrawal.status == "completed":
            if sent is None or sent.status != "completed" or sent.amount != withdrawal.amount:
                lost.append(f"{name}: custody has {sent and (sent.status, sent.amount)}")
            if keys[f"withdrawal:{withdrawal.id}:complete"] != 1 or keys[f"withdrawal:{withdrawal.id}:release"]:
                problems.append(f"{name}: entries {dict(keys)}")
        elif withdrawal.status in released:
            if keys[f"withdrawal:{withdrawal.id}:release"] != 1 or keys[f"withdrawal:{withdrawal.id}:complete"]:
                problems.append(f"{name}: entries {dict(keys)}")
            if withdrawal.status == "failed" and sent is not None and sent.status != "failed":
                lost.append(f"{name}: failed here but {sent.status} at custody")
            if withdrawal.status in ("rejected", "cancelled") and sent is not None:
                lost.append(f"{name}: sent to custody although {withdrawal.status}")
        else:
            problems.append(f"{name}: not final after the drain")


def parse_args(argv: list[str] | None):
    """The command line: the soak's options, and the hidden ones of a client process."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=300, help="seconds of load with faults (default 300)")
    parser.add_argument("--traders", type=int, default=3, help="trader client processes (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes (default 2)")
    parser.add_argument("--fault-interval", type=float, default=4.0, help="mean seconds between two faults (default 4)")
    parser.add_argument("--drain-timeout", type=float, default=240, help="seconds allowed to drain (default 240)")
    parser.add_argument("--seed", default=None, help="random seed (default: random)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs (kept anyway on failure)")
    parser.add_argument("--client", choices=["trader", "approver"], help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = secrets.randbelow(2**32)
    return args


def main(argv: list[str] | None = None) -> int:
    """``bench/soak.py``: the orchestrator, or (``--client``) one of its client processes."""
    args = parse_args(argv)
    if args.client:
        return client_main(args.client, args.index, args.config)
    # SIGTERM unwinds like Ctrl-C, so that the processes are stopped and the scratch database dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return Soak(args).main()


if __name__ == "__main__":
    sys.exit(main())
