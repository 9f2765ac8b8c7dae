"""Benchmark of deposits: the custody webhook, two Celery workers crediting the inbox, callback-to-credit latency.

Prints JSON lines ``{"bench": "deposits", "figure": ..., ...}``:

- ``webhook_callbacks_per_second``: signed deposit callbacks accepted (200, stored in the inbox)
  per second, over real HTTP to a gunicorn server process, by concurrent clients;
- ``deposits_credited_per_second``: how fast two Celery worker processes (solo pool each) credit a
  backlog of stored callbacks, inbox event to journal entry, from the first credit to the last
  (their ``credited_at`` in the database). Measured twice in the same run: ``batch`` 1 (one event
  per transaction: the path before batching, the reference) and ``batch`` ``WALLETS_INBOX_BATCH``;
- ``callback_to_credit_latency_ms``: p50 and p99 of the time from sending a callback to the
  deposit being credited (the credit's timestamp in its transaction), at a steady rate, with the
  batching workers.

Everything runs against a scratch database created for the run (migrated, dropped at the end)
on the PostgreSQL of ``DATABASE_URL``, the Redis of ``REDIS_URL`` (``make bench`` provides both)
and a Celery queue of its own. Production settings (``DEBUG`` off). Sizes: environment
variables ``BENCH_CALLBACKS`` (per backlog, default 2000), ``BENCH_CLIENTS`` (8),
``BENCH_LATENCY_SAMPLES`` (1000), ``BENCH_LATENCY_RATE`` (per second, default 200),
``BENCH_BATCH`` (events per transaction of the batching workers, default 200).
"""

import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CALLBACKS = int(os.environ.get("BENCH_CALLBACKS", 2000))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", 8))
LATENCY_SAMPLES = int(os.environ.get("BENCH_LATENCY_SAMPLES", 1000))
LATENCY_RATE = float(os.environ.get("BENCH_LATENCY_RATE", 200))
BATCH = int(os.environ.get("BENCH_BATCH", 200))
WORKERS = 2
USERS = 100
WEB_WORKERS, WEB_THREADS = 2, 4
TIMEOUT = 600


def emit(figure: str, **values) -> None:
    print(json.dumps({"bench": "deposits", "figure": figure, **values}), flush=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


class Processes:
    """Child processes in their own process groups, stopped (then killed) at the end."""

    def __init__(self):
        self.children: list[subprocess.Popen] = []

    def start(self, command: list[str], env: dict, log: Path) -> subprocess.Popen:
        with open(log, "wb") as out:
            child = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.children.append(child)
        return child

    def stop(self, child: subprocess.Popen) -> None:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()

    def stop_all(self) -> None:
        for child in self.children:
            self.stop(child)


def wait_for(predicate, what: str, timeout: float = TIMEOUT, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise SystemExit(f"bench deposits: timed out waiting for {what}")
        time.sleep(interval)
    return result


def main() -> None:
    if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
        from devtools.localservices import service_env

        os.environ.update(service_env())
    import psycopg

    from apps.ledger.signing import private_key_generate_hex

    base_url = os.environ["DATABASE_URL"]
    scratch = f"bench_deposits_{os.getpid()}"
    run = secrets.token_hex(4)
    env = {
        **os.environ,
        "DATABASE_URL": with_database(base_url, scratch),
        "DJANGO_SETTINGS_MODULE": "exchange.settings.soak",  # production's, with the simulated custody
        "DJANGO_SECRET_KEY": secrets.token_hex(32),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DJANGO_ADMIN_URL": "admin/",
        "DJANGO_SECURE_SSL_REDIRECT": "false",
        "CUSTODY_WEBHOOK_SECRET": secrets.token_hex(32),
        "API_SECRET_ENCRYPTION_KEY": secrets.token_hex(32),
        "LEDGER_SIGNING_KEY": private_key_generate_hex(),
        "CELERY_TASK_DEFAULT_QUEUE": f"bench-deposits-{run}",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    with psycopg.connect(base_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{scratch}"')
    os.environ.update(env)
    processes = Processes()
    logs = ROOT / ".local" / "bench"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        run_bench(env, processes, logs)
    finally:
        processes.stop_all()
        from django.db import connections

        connections.close_all()
        with psycopg.connect(base_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')
        forget_queue(env)


def forget_queue(env: dict) -> None:
    import redis

    queue = env["CELERY_TASK_DEFAULT_QUEUE"]
    client = redis.Redis.from_url(env["REDIS_URL"])
    client.delete(queue, f"_kombu.binding.{queue}", *client.keys(f"{queue}\x06\x16*"))
    client.close()


def run_bench(env: dict, processes: Processes, logs: Path) -> None:
    import django

    django.setup()
    import requests
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db.models import Max, Min

    from apps.ledger.models import Asset
    from apps.wallets.custody.signing import signed_headers
    from apps.wallets.models import Deposit, DepositStatus
    from apps.wallets.services import deposit_address_get_or_create

    call_command("migrate", verbosity=0)
    btc = Asset.objects.create(code="BTC", name="Bitcoin", decimals=8, network="simnet", confirmations_required=1)
    users = [get_user_model().objects.create(username=f"bench-{n}") for n in range(USERS)]
    addresses = [deposit_address_get_or_create(user_id=user.id, asset=btc).address for user in users]

    port = free_port()
    url = f"http://127.0.0.1:{port}/custody/callbacks/"
    web = processes.start(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "exchange.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(WEB_WORKERS),
            "--threads",
            str(WEB_THREADS),
            "--log-level",
            "warning",
        ],
        env,
        logs / "gunicorn.log",
    )

    def web_ready():
        if web.poll() is not None:
            raise SystemExit(f"gunicorn exited; see {logs / 'gunicorn.log'}")
        try:  # the server answers; its worker check may still say "no worker"
            return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()["database"] == "ok"
        except (requests.RequestException, ValueError, KeyError):
            return False

    wait_for(web_ready, "the web server", timeout=60, interval=0.1)
    secret = settings.CUSTODY_WEBHOOK_SECRET
    local = threading.local()

    def send(n: int, prefix: str) -> tuple[int, float]:
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        body = json.dumps(
            {
                "event_id": f"{prefix}-{n}",
                "type": "deposit",
                "asset": "BTC",
                "address": addresses[n % USERS],
                "amount": "0.001",
                "txid": f"{prefix}-{n}",
                "vout": 0,
                "confirmations": 1,
                "status": "confirmed",
            }
        ).encode()
        sent = time.time()
        status = session.post(url, data=body, headers=signed_headers(secret=secret, body=body), timeout=30).status_code
        return status, sent

    def credited(prefix: str) -> int:
        return Deposit.objects.filter(txid__startswith=f"{prefix}-", status=DepositStatus.CREDITED).count()

    # 1. The webhook alone: callbacks accepted per second (no worker yet: the events wait in the inbox).
    for n in range(CLIENTS * 4):  # warm up connections and workers
        send(n, "warm")
    started = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        statuses = [status for status, _sent in pool.map(lambda n: send(n, "load"), range(CALLBACKS))]
    elapsed = time.perf_counter() - started
    if statuses != [200] * CALLBACKS:
        raise SystemExit(f"bench deposits: webhook answered {sorted(set(statuses))}")
    emit(
        "webhook_callbacks_per_second",
        value=round(CALLBACKS / elapsed, 1),
        callbacks=CALLBACKS,
        clients=CLIENTS,
        web=f"gunicorn {WEB_WORKERS} workers x {WEB_THREADS} threads",
    )

    def start_workers(batch: int) -> list[subprocess.Popen]:
        started = []
        for n in range(WORKERS):
            log = logs / f"worker-{batch}-{n}.log"
            started.append(
                processes.start(
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "exchange",
                        "worker",
                        "--pool",
                        "solo",
                        "--queues",
                        env["CELERY_TASK_DEFAULT_QUEUE"],
                        "--loglevel",
                        "WARNING",
                        "--without-gossip",
                        "--without-mingle",
                        "--without-heartbeat",
                        "--hostname",
                        f"bench-{os.getpid()}-{batch}-{n}@%h",
                    ],
                    {**env, "WALLETS_INBOX_BATCH": str(batch)},
                    log,
                )
            )
        return started

    def credit_rate(prefix: str) -> float:
        times = Deposit.objects.filter(txid__startswith=f"{prefix}-").aggregate(
            first=Min("credited_at"), last=Max("credited_at")
        )
        return CALLBACKS / max((times["last"] - times["first"]).total_seconds(), 1e-6)

    # 2. Two workers drain a backlog, one event per transaction (the reference), then a batch per transaction.
    for batch, prefix in [(1, "load"), (BATCH, "batched")]:
        if prefix != "load":
            with ThreadPoolExecutor(CLIENTS) as pool:
                statuses = list(pool.map(lambda n, prefix=prefix: send(n, prefix)[0], range(CALLBACKS)))
            if statuses != [200] * CALLBACKS:
                raise SystemExit(f"bench deposits: webhook answered {sorted(set(statuses))}")
        workers = start_workers(batch)
        wait_for(lambda prefix=prefix: credited(prefix) == CALLBACKS, "the workers to credit", interval=0.05)
        emit(
            "deposits_credited_per_second",
            value=round(credit_rate(prefix), 1),
            deposits=CALLBACKS,
            batch=batch,
            workers=f"{WORKERS} processes, solo pool",
            reference=batch == 1,
        )
        if batch == 1:
            for worker in workers:
                processes.stop(worker)
    wait_for(lambda: credited("warm") == CLIENTS * 4, "the warm-up deposits", interval=0.05)

    # 3. Latency at a steady rate: callback sent -> deposit credited, by the batching workers.
    sent_at: dict[str, float] = {}
    interval = 1 / LATENCY_RATE
    begin = time.perf_counter()

    def paced(n: int) -> None:
        time.sleep(max(0.0, begin + n * interval - time.perf_counter()))
        status, sent = send(n, "latency")
        if status != 200:
            raise SystemExit(f"bench deposits: webhook answered {status}")
        sent_at[f"latency-{n}"] = sent

    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(paced, range(LATENCY_SAMPLES)))
    achieved = LATENCY_SAMPLES / (time.perf_counter() - begin)
    wait_for(lambda: credited("latency") == LATENCY_SAMPLES, "the latency deposits", interval=0.05)
    latencies = sorted(
        (deposit.credited_at.timestamp() - sent_at[deposit.txid]) * 1000
        for deposit in Deposit.objects.filter(txid__startswith="latency-")
        if deposit.credited_at is not None
    )
    quantiles = statistics.quantiles(latencies, n=100, method="inclusive")
    emit(
        "callback_to_credit_latency_ms",
        p50=round(quantiles[49], 1),
        p99=round(quantiles[98], 1),
        samples=LATENCY_SAMPLES,
        rate_per_second=round(achieved, 1),
        batch=BATCH,
        workers=f"{WORKERS} processes, solo pool",
    )


if __name__ == "__main__":
    main()
