"""The orchestrator: the scratch database and queue, the services, the clients, the faults, the drain, and the
command line."""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

from .checks import Checks
from .clients import client_main
from .common import (
    ASSETS,
    FAULT_KINDS,
    MARKETS,
    NETWORK_FEES,
    RETRY_WINDOW,
    SIMULATOR_CONFIRMATIONS,
    START_TIMEOUT,
    WEB_THREADS,
    WEB_WORKERS,
    WITHDRAWAL_ADDRESSES,
    WITHDRAWAL_ASSETS,
    emit,
    free_port,
    with_database,
)
from .processes import Engine, Process, Processes, Streams, Web, WorkerPool, terminate_backends

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
            "ORDERS_ENGINE": "sequencer",  # placements and cancels go to the engine's sequencers
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
            # The inbox sweep looks every second for events a killed worker left (older than 2 s).
            "WALLETS_INBOX_SWEEP_AFTER": "2",
            "WALLETS_INBOX_SWEEP_INTERVAL": "1",
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
        self.engine = Engine(self.processes)
        self.engine.replenish()
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

        me = [sys.executable, "-m", "bench.soak"]  # from the repository, the processes' working directory
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
        self.engine.stop()
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
            time.sleep(1)  # the sequencers end with their connections (active and standby alike)
            self.engine.replenish()
        elif kind == "web_killed":
            web.restart(kill=True)
        elif kind == "web_restarted":
            web.restart(kill=False)
        elif kind == "relay_killed":
            self.streams.kill_relay()
        elif kind == "engine_killed":
            self.engine.kill_active()
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
        self.engine.replenish()  # a sequencer ends with its terminated connection; its supervisor restarts it
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
        totals: dict[str, Counter] = {
            name: Counter() for name in ("attempted", "acknowledged", "refused", "unknown", "refusal_codes")
        }
        http: Counter = Counter()
        for record in records:
            for name, counts in record["outcomes"].items():
                totals[name].update(counts)
            http.update(record["http"])
        return {**{name: dict(sorted(counts.items())) for name, counts in totals.items()}, "http": dict(http)}


def parse_args(argv: list[str] | None):
    """The command line: the soak's options, and the hidden ones of a client process."""
    summary = (sys.modules[__package__].__doc__ or "").splitlines()[0]  # the first line of the package's docstring
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=summary)
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
    """``python -m bench.soak``: the orchestrator, or (``--client``) one of its client processes."""
    args = parse_args(argv)
    if args.client:
        return client_main(args.client, args.index, args.config)
    # SIGTERM unwinds like Ctrl-C, so that the processes are stopped and the scratch database dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return Soak(args).main()
