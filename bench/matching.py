"""Matching benchmark: orders per second and placement latency, every order fully settled in the ledger.

Run by ``make bench`` (or ``python bench/matching.py [--orders N] [--profile FILE]`` under
``python -m devtools.localservices exec --``). Prints one JSON line per case::

    {"bench": "matching", "case": "1 market", "markets": 1, "workers": 1, "orders": ...,
     "orders_per_s": ..., "p50_ms": ..., "p99_ms": ..., "trades": ..., "reconcile_ok": true}

Each worker process places a stream of requests on its market through the real services
(:func:`apps.orders.services.order_place` / ``order_cancel``: market lock, hold, one journal
entry per fill, trades, releases, one PostgreSQL transaction each), after a warm-up that
builds a book: 60 % resting limit orders (within 10 ticks of the mid), 25 % marketable
limit orders (IOC, crossing up to 3 ticks), 10 % cancels of the worker's own resting
orders, 5 % market orders (buy by quote budget, buy by quantity, sell). Latency is the
wall time of one service call; orders per second is the requests of all workers divided
by the wall time of the timed phase. After each case ``reconcile`` checks every invariant
(held funds equal open orders' holds, orders' holds add up, entries balance).

Cases: one market with one worker; one market with two workers (they queue on the
market lock); four markets with a worker each, with separate users and with the same
users trading all four markets (their accounts are shared: USDT above all). These are the
``inline`` engine (``ORDERS_ENGINE=inline``: one transaction per order in the caller), the
reference of the ``sequencer`` cases measured in the same run: the same mix from
``--callers`` caller processes per market, each call handed to a ``manage.py run_engine``
process per market that applies a batch of commands per transaction; latency there is the
caller's whole wait (submit, batch, commit, notification, reading the order). The sequencer
plans each batch in memory and writes it set-based (``apps.orders.services.batching``); the
case ``1 market, sequencer per command`` runs the same engines with ``ORDERS_ENGINE_PLANNED=false``
(every command through inline placement's code in a savepoint), the reference of the planned path.
The case ``1 market, sequencer, REST API`` sends the same mix as HTTP requests (an API key per user)
to gunicorn (``--callers`` sync workers, ``bench._rest_settings``: no DEBUG, no rate limits) in
front of the planned sequencer; latency there is the whole HTTP request. The case
``1 market, sequencer, queued backlog`` measures the engine alone: the same mix queued at once as
pending commands and drained by one engine in batches of ``ORDERS_ENGINE_BATCH`` (no caller shares the
machine's cores: its ceiling when the callers run on other hosts); ``4 markets, sequencer, queued backlog``
does the same with the mix dealt to four markets, an engine process each (what the second core adds). The cases
``1 market, sequencer, paced N/s`` offer the same mix at a fixed rate (``PACED_RATES``), an open-loop load
as many independent clients make: commands are inserted every 2 ms and answered on one reply channel that
a receiver process listens to; latency is from a command's commit to its answer's arrival. These cases and the
backlog ones also give ``machine_busy``, the share of all cores busy during the timed phase (every process, from
/proc/stat): how much room the machine had left.

It runs in its own database (``<name>_bench``, created and dropped here), never in the
development database.
"""

import argparse
import cProfile
import io
import json
import multiprocessing
import os
import queue
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._scratch import bench_database_url, recreate_database  # noqa: E402 (ROOT is on sys.path now)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exchange.settings.local")

D = Decimal
MARKETS = [("BTC", 8, "50000"), ("ETH", 18, "3000"), ("SOL", 9, "150"), ("LTC", 8, "80")]
TICK, STEP = D("0.01"), D("0.0001")
USERS_PER_MARKET = 10
WARMUP = 300  # untimed requests per worker that build the book (--warmup)
PACED_RATES = (500, 1000, 2000)  # commands per second offered in the paced cases
WORKERS_READY_SECONDS = 600  # a case whose workers are not all warmed up by then fails instead of waiting for ever


def setup_django() -> None:
    import django
    from django.conf import settings

    django.setup()
    settings.DEBUG = False  # no query log
    if os.environ.get("BENCH_SERVER_SIDE_BINDING"):  # what-if: every statement bound server-side and prepared
        settings.DATABASES["default"].setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=5)


def prepare(case_markets: int, shared_users: bool) -> dict:
    """Empty the bench database and create assets, markets, fee schedule and users funded from equity.

    Returns ``{symbol: [user ids]}``.
    """
    from django.core.management import call_command

    from apps.ledger.models import AccountKind, Asset
    from apps.ledger.services import credit, debit, system_account, user_account, user_accounts
    from apps.orders.models import FeeSchedule
    from apps.orders.services import market_create
    from bench._funding import capital_grant

    call_command("flush", "--no-input", verbosity=0)
    FeeSchedule.objects.create(name="default", maker_rate=D("0.001"), taker_rate=D("0.001"), is_default=True)
    from django.contrib.auth import get_user_model

    User = get_user_model()
    usdt = Asset.objects.create(code="USDT", name="Tether", decimals=6)
    plan = {}
    shared = [User.objects.create(username=f"trader{n}") for n in range(USERS_PER_MARKET)] if shared_users else None
    for code, decimals, _ in MARKETS[:case_markets]:
        base = Asset.objects.create(code=code, name=code, decimals=decimals)
        market = market_create(
            base=base, quote=usdt, tick_size=TICK, step_size=STEP, min_qty=STEP, max_qty=D("10000"), min_notional=D("1")
        )
        users = shared or [User.objects.create(username=f"{code}-trader{n}") for n in range(USERS_PER_MARKET)]
        plan[market.symbol] = [user.id for user in users]
    for symbol, user_ids in plan.items():
        base = Asset.objects.get(code=symbol.split("-")[0])
        for user_id in user_ids:
            for asset, amount in ((base, D("1000000")), (usdt, D("100000000000"))):
                user_accounts(user_id, asset)
                capital_grant(  # owner capital, not a deposit: custody (invariant 5) stays untouched
                    legs=[
                        debit(system_account(AccountKind.EQUITY, asset), amount),
                        credit(user_account(user_id, asset), amount),
                    ],
                    memo="Benchmark funding",
                )
    return plan


class Flow:
    """The request stream of one worker on one market (deterministic per seed)."""

    def __init__(self, symbol: str, mid: str, user_ids: list[int], seed: int):
        self.symbol, self.mid, self.users = symbol, D(mid), user_ids
        self.rng = random.Random(seed)
        self.resting: list[tuple[int, int]] = []  # (order id, user id) placed by this worker, maybe still open

    def qty(self) -> D:
        return STEP * self.rng.randint(1, 200)

    def place(self, user: int, **order):
        """Place an order for ``user`` on this flow's market; the order (``id``, ``status``) or ``None`` if refused."""
        from apps.orders.services import order_place

        return order_place(user_id=user, market=self.symbol, **order)

    def cancel(self, order_id: int, owner: int):
        from apps.orders.services import order_cancel

        return order_cancel(order_id=order_id, user_id=owner)

    def next(self):
        """A zero-argument callable for the next request, and its kind."""
        order_place, order_cancel = self.place, self.cancel
        rng, user = self.rng, self.rng.choice(self.users)
        roll = rng.random()
        if roll < 0.60:
            side = rng.choice(["buy", "sell"])
            offset = TICK * rng.randint(1, 10) * (-1 if side == "buy" else 1)
            return "resting", lambda: order_place(user, side=side, price=self.mid + offset, qty=self.qty())
        if roll < 0.85:
            side = rng.choice(["buy", "sell"])
            offset = TICK * rng.randint(1, 3) * (1 if side == "buy" else -1)
            return "marketable", lambda: order_place(
                user,
                side=side,
                price=self.mid + offset,
                qty=self.qty(),
                time_in_force="IOC",
            )
        if roll < 0.95:
            if not self.resting:
                return self.next()
            order_id, owner = self.resting.pop(rng.randrange(len(self.resting)))
            return "cancel", lambda: order_cancel(order_id, owner)
        kind = rng.choice(["budget", "buy", "sell"])
        if kind == "budget":
            return "market", lambda: order_place(
                user,
                side="buy",
                type="market",
                quote_qty=(self.mid * self.qty()).quantize(D("0.000001")),
            )
        return "market", lambda: order_place(user, side=kind, type="market", qty=self.qty())

    def run(self, count: int) -> list[float]:
        """Run ``count`` requests; return each one's latency in seconds."""
        from apps.core.errors import DomainError

        latencies = []
        for _ in range(count):
            kind, call = self.next()
            started = time.perf_counter()
            try:
                result = call()
            except DomainError:  # a cancel of an order filled meanwhile, a self-trade-expired one...
                result = None
            latencies.append(time.perf_counter() - started)
            if kind == "resting" and result is not None and result.status in ("open", "partially_filled"):
                self.resting.append((result.id, result.user_id))
        return latencies


class RestFlow(Flow):
    """The same request stream through the REST API (``POST /api/v1/orders/``, ``DELETE /api/v1/orders/{id}/``),
    one kept-alive HTTP connection, each user with its API key; a 4xx answer is a refusal (``None``)."""

    def __init__(self, symbol: str, mid: str, user_ids: list[int], seed: int, port: int, tokens: dict[int, str]):
        import http.client

        super().__init__(symbol, mid, user_ids, seed)
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.tokens = tokens

    def call(self, method: str, path: str, user: int, body: dict | None = None):
        from types import SimpleNamespace

        headers = {"Authorization": f"Token {self.tokens[user]}", "Content-Type": "application/json"}
        self.http.request(method, path, body=json.dumps(body, default=str) if body else None, headers=headers)
        response = self.http.getresponse()
        data = response.read()
        if response.status >= 500:
            raise SystemExit(f"{method} {path}: HTTP {response.status} {data[:300]!r}")
        if response.status >= 400:
            return None
        order = json.loads(data)
        return SimpleNamespace(id=order["id"], status=order["status"], user_id=user)

    def place(self, user: int, **order):
        return self.call("POST", "/api/v1/orders/", user, {"market": self.symbol, "type": "limit", **order})

    def cancel(self, order_id: int, owner: int):
        return self.call("DELETE", f"/api/v1/orders/{order_id}/", owner)


def _stat_cpu_seconds(stat: str, *, reaped: bool = False) -> float:
    """CPU time (user + system) in a ``/proc/<pid>/stat`` line, with that of its reaped children if ``reaped``
    (0 where unreadable)."""
    try:
        fields = stat.rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if reaped else 0)
    except (IndexError, ValueError):
        return 0.0
    return ticks / os.sysconf("SC_CLK_TCK")


def backend_cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """CPU time (user + system) of a local process, from /proc (0 where unavailable)."""
    try:
        return _stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), reaped=reaped)
    except OSError:
        return 0.0


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process, of its living descendants and of those it reaped (gunicorn's workers, PostgreSQL's
    backends: a backend that ended during the measure counts in its postmaster's reaped time), from /proc."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return backend_cpu_seconds(pid, reaped=True) + sum(tree_cpu_seconds(int(child)) for child in children)


def machine_cpu_jiffies(stat: str | None = None) -> tuple[int, int]:
    """``(busy, total)`` clock ticks of every core since boot, from the ``cpu`` line of ``stat`` (the text of
    /proc/stat, read when not given; ``(0, 0)`` where unavailable). Busy is all but idle and iowait; guest time is
    left out of the total, being counted in user time already (proc(5))."""
    try:
        text = Path("/proc/stat").read_text() if stat is None else stat
        ticks = [int(value) for value in text.split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0, 0
    if len(ticks) < 5:
        return 0, 0
    total = sum(ticks)
    return total - ticks[3] - ticks[4], total


ENGINE_APP_NAME = "bench-engine"  # the engines' PostgreSQL application_name (PGAPPNAME)


def postgres_pids() -> tuple[int, list[int]]:
    """The pid of the bench database's PostgreSQL server (its ``postmaster.pid``; the server is local) and those
    of the engines' backends."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW data_directory")
        data_directory = cursor.fetchone()[0]
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", [ENGINE_APP_NAME])
        engines = [pid for (pid,) in cursor.fetchall()]
    connection.close()  # children open their own connections
    return int((Path(data_directory) / "postmaster.pid").read_text().split()[0]), engines


def worker(
    symbol: str,
    mid: str,
    user_ids: list[int],
    seed: int,
    count: int,
    start,
    results,
    profile: str | None,
    engine: str,
    rest: tuple[int, dict[int, str]] | None = None,
):
    from django.conf import settings
    from django.db import connection

    setup_django()
    settings.ORDERS_ENGINE = engine
    flow = Flow(symbol, mid, user_ids, seed) if rest is None else RestFlow(symbol, mid, user_ids, seed, *rest)
    flow.run(WARMUP)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    start.wait()
    profiler = cProfile.Profile(time.process_time) if profile else None
    if profiler:
        profiler.enable()
    cpu, db_cpu, began = time.process_time(), backend_cpu_seconds(backend), time.perf_counter()
    latencies = flow.run(count)
    ended = time.perf_counter()
    cpu, db_cpu = time.process_time() - cpu, backend_cpu_seconds(backend) - db_cpu
    if profiler and profile:
        profiler.disable()
        profiler.dump_stats(profile)
    results.put((began, ended, latencies, cpu, db_cpu))


def start_engines(symbols: list[str], *, planned: bool = True, profile: str | None = None) -> list:
    """One ``run_engine`` process per market on the bench database, each waited for until ready.

    ``planned`` false: the per-command path (``ORDERS_ENGINE_PLANNED=false``). ``profile``: the first
    engine runs under cProfile (CPU time, ``bench/_profiled.py``) and writes its stats there when it
    stops (SIGTERM)."""
    import tempfile

    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "ORDERS_ENGINE_PLANNED": "true" if planned else "false",
        "PGAPPNAME": ENGINE_APP_NAME,
    }
    engines = []
    for n, symbol in enumerate(symbols):
        log = tempfile.NamedTemporaryFile(prefix=f"bench-engine-{symbol}-", suffix=".log", delete=False)
        profiled = [str(ROOT / "bench" / "_profiled.py"), profile] if profile and n == 0 else []
        engine = subprocess.Popen(
            [sys.executable, *profiled, "manage.py", "run_engine", "--market", symbol],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while b"engine ready" not in Path(log.name).read_bytes():
            if engine.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"run_engine --market {symbol} did not start: {Path(log.name).read_text()}")
            time.sleep(0.05)
        engines.append(engine)
    return engines


def start_api(port: int, workers: int):
    """gunicorn serving the project (``bench._rest_settings``) on ``port``, waited for until it answers
    (``/api/v1/time/``: ``/healthz`` also wants a Celery worker, which the bench has no use for)."""
    import http.client
    import tempfile

    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench._rest_settings", "ORDERS_ENGINE": "sequencer"}
    log = tempfile.NamedTemporaryFile(prefix="bench-gunicorn-", suffix=".log", delete=False)
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), "exchange.wsgi:application", "-b", f"127.0.0.1:{port}"]
        + ["-w", str(workers), "--timeout", "120"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            probe = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            probe.request("GET", "/api/v1/time/")
            if probe.getresponse().status == 200:
                return server
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"gunicorn did not start: {Path(log.name).read_text()[-2000:]}")
        time.sleep(0.2)


def api_tokens(user_ids) -> dict[int, str]:
    """A ``read``+``trade`` API key per user: ``{user id: raw key}``."""
    from apps.accounts.services import api_key_create

    return {
        user_id: api_key_create(user_id=user_id, name="bench", scopes=["read", "trade"]).raw_key for user_id in user_ids
    }


def run_workers(
    plan: dict, workers: int, orders: int, profile: str | None, engine: str, rest, servers: list
) -> tuple[list[tuple], dict[str, float]]:
    """Run the case's worker processes to the end; return each one's ``(began, ended, latencies, cpu, db cpu)``
    and the CPU seconds the timed phase cost ``servers`` (the engines, gunicorn) and PostgreSQL, in all."""
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(workers + 1), context.Queue()  # this process starts the clock too
    symbols = list(plan)
    processes = []
    for n in range(workers):
        symbol = symbols[n % len(symbols)]
        mid = next(m for code, _, m in MARKETS if symbol.startswith(code + "-"))
        processes.append(
            context.Process(
                target=worker,
                args=(
                    symbol,
                    mid,
                    plan[symbol],
                    n,
                    orders // workers,
                    start,
                    results,
                    profile if n == 0 else None,
                    "inline" if engine == "inline" else "sequencer",
                    rest,
                ),
            )
        )
    for process in processes:
        process.start()
    try:
        start.wait(timeout=WORKERS_READY_SECONDS)
    except threading.BrokenBarrierError:  # a worker died in its warm-up (no database connection left, say)
        for process in processes:
            process.kill()
        raise SystemExit(f"the workers were not all ready within {WORKERS_READY_SECONDS} s") from None
    postgres, engine_backends = postgres_pids()
    spent = {
        "servers": -sum(tree_cpu_seconds(s.pid) for s in servers),
        "postgres": -tree_cpu_seconds(postgres),
        "engine_backends": -sum(backend_cpu_seconds(pid) for pid in engine_backends),
    }
    outcomes: list[tuple] = []
    while len(outcomes) < len(processes):
        try:
            outcomes.append(results.get(timeout=1))
        except queue.Empty:
            failed = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            if failed:
                for process in processes:
                    process.kill()
                raise SystemExit(f"a worker failed with exit code {failed[0]}") from None
    spent["servers"] += sum(tree_cpu_seconds(s.pid) for s in servers)
    spent["postgres"] += tree_cpu_seconds(postgres)
    spent["engine_backends"] += sum(backend_cpu_seconds(pid) for pid in engine_backends)
    for process in processes:
        process.join()
    return outcomes, spent


def run_case(
    name: str,
    markets: int,
    workers: int,
    shared_users: bool,
    orders: int,
    profile: str | None,
    engine: str = "inline",
    engine_profile: str | None = None,
) -> dict:
    from django.db import connections

    from apps.orders.models import Trade

    plan = prepare(markets, shared_users)
    rest = None
    servers: list = []
    if engine == "rest":
        port = 18000 + os.getpid() % 1000
        rest = (port, api_tokens({user for users in plan.values() for user in users}))
    connections.close_all()  # children open their own connections
    engines: list = []
    try:
        if engine != "inline":
            engines = start_engines(
                list(plan),
                planned=engine != "sequencer_per_command",
                profile=engine_profile and f"{engine_profile}.{engine}",  # one file per engine kind
            )
        if rest is not None:
            servers.append(start_api(rest[0], workers))
        outcomes, spent = run_workers(plan, workers, orders, profile, engine, rest, [*engines, *servers])
    finally:  # the servers and engines end with the case, whatever happened
        processes_stop([*servers, *engines])
    latencies = sorted(latency for outcome in outcomes for latency in outcome[2])
    elapsed = max(outcome[1] for outcome in outcomes) - min(outcome[0] for outcome in outcomes)
    report = sealed_reconcile()
    return {
        "bench": "matching",
        "case": name,
        "engine": engine,
        "markets": markets,
        "workers": workers,
        "shared_users": shared_users,
        "orders": len(latencies),
        "orders_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2),
        # CPU per request, less sensitive than the rates to what else runs on the machine:
        # the worker processes (Python) and their PostgreSQL backends (/proc).
        "app_cpu_ms": round(sum(outcome[3] for outcome in outcomes) / len(latencies) * 1000, 3),
        "db_cpu_ms": round(sum(outcome[4] for outcome in outcomes) / len(latencies) * 1000, 3),
        # The engines' (or gunicorn's) CPU per request, and every PostgreSQL process's (the callers'
        # backends, the engines', the WAL writer...): with app_cpu_ms, what one request costs the machine.
        "server_cpu_ms": round(spent["servers"] / len(latencies) * 1000, 3),
        "postgres_cpu_ms": round(spent["postgres"] / len(latencies) * 1000, 3),
        "engine_backend_cpu_ms": round(spent["engine_backends"] / len(latencies) * 1000, 3),  # part of postgres_cpu_ms
        "cores": os.cpu_count(),
        "server_side_binding": bool(os.environ.get("BENCH_SERVER_SIDE_BINDING")),
        "trades": Trade.objects.count(),
        "reconcile_ok": report.ok,
        "reconcile_failed": [
            {"check": check.name, "offending": check.offending, "first": check.details[:1]}
            for check in report.checks
            if not check.ok
        ],
    }


class QueuedFlow(Flow):
    """The same request stream written straight into the engine's queue as pending commands (the payloads
    ``order_place`` / ``order_cancel`` would queue), answered by nobody: the backlog case. Cancels name the
    resting orders of the warm-up flow it continues (the ids of orders placed in the backlog are not known
    before the engine applies them)."""

    def __init__(self, warmed: Flow, market_id: int, commands: list, *, reply_to: str = ""):
        super().__init__(warmed.symbol, str(warmed.mid), warmed.users, 0)
        self.rng, self.resting, self.market_id, self.reply_to = warmed.rng, warmed.resting, market_id, reply_to
        self.commands = commands  # where the commands made go (several flows may share it)

    def _queue(self, kind: str, user: int, payload: dict) -> None:
        from django.utils import timezone

        from apps.orders.models import Command

        self.commands.append(
            Command(
                market_id=self.market_id,
                kind=kind,
                user_id=user,
                request_hash="",
                token=uuid.uuid4().hex,
                reply_to=self.reply_to,
                payload={name: str(value) if isinstance(value, D) else value for name, value in payload.items()},
                created_at=timezone.now(),
            )
        )

    def place(self, user: int, **order):
        defaults = {"type": "limit", "price": None, "qty": None, "quote_qty": None, "time_in_force": None}
        options = {"post_only": False, "stp": None, "client_order_id": ""}
        self._queue("place", user, {"user_id": user, "market": self.symbol, **defaults, **options, **order})

    def cancel(self, order_id: int, owner: int):
        self._queue("cancel", owner, {"order_id": order_id, "user_id": owner, "by_operator": False})


def _warmed_up_and_queued(
    orders: int, *, markets: int = 1, reply_to: str = ""
) -> tuple[list[QueuedFlow], list, list[subprocess.Popen]]:
    """``markets`` markets prepared, each one's book built by a warm-up through its running engine, and ``orders``
    commands of the mix made (not inserted), dealt to the markets in turn: the markets' flows, the commands in the
    order they were made (their ids' order once inserted), and the engines, still running."""
    from django.conf import settings

    from apps.orders.models import Market

    plan = prepare(markets, False)
    settings.ORDERS_ENGINE = "sequencer"
    engines = start_engines(list(plan))
    try:
        flows: list[QueuedFlow] = []
        commands: list = []  # Command rows, made here and inserted by the case
        for seed, (symbol, user_ids) in enumerate(plan.items()):
            mid = next(m for code, _, m in MARKETS if symbol.startswith(code + "-"))
            warmed = Flow(symbol, mid, user_ids, seed=seed)
            warmed.run(WARMUP)
            flows.append(QueuedFlow(warmed, Market.objects.get(symbol=symbol).id, commands, reply_to=reply_to))
        for n in range(orders):
            _, queue_it = flows[n % len(flows)].next()
            queue_it()
    except BaseException:
        processes_stop(engines)
        raise
    return flows, commands, engines


def processes_stop(processes: list[subprocess.Popen]) -> None:
    """Terminate (SIGTERM) every one of ``processes`` at once, then wait for each to end."""
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout=60)


class _EngineCpu:
    """CPU seconds of engine processes, of their PostgreSQL backends and of the whole server, from when it is made;
    :meth:`spent` gives ``(engines, their backends, PostgreSQL)`` since then, and :meth:`machine_busy` the share of
    all the machine's cores busy meanwhile (every process: callers, Redis and the kernel too)."""

    def __init__(self, engines: list[subprocess.Popen]) -> None:
        self.engines = engines
        self.postgres, self.backends = postgres_pids()
        self.before = self._now()
        self.machine_before = machine_cpu_jiffies()

    def _now(self) -> tuple[float, float, float]:
        backends = sum(backend_cpu_seconds(pid) for pid in self.backends)
        engines = sum(tree_cpu_seconds(engine.pid) for engine in self.engines)
        return engines, backends, tree_cpu_seconds(self.postgres)

    def spent(self) -> tuple[float, float, float]:
        engines, backends, postgres = self._now()
        return engines - self.before[0], backends - self.before[1], postgres - self.before[2]

    def machine_busy(self) -> float | None:
        """The share (0 to 1) of all cores' time busy since this was made; ``None`` without /proc/stat."""
        busy, total = (now - before for now, before in zip(machine_cpu_jiffies(), self.machine_before, strict=True))
        return round(busy / total, 3) if total else None


def run_backlog_case(name: str, orders: int, markets: int, engine_profile: str | None) -> dict:
    """The engines alone: a warm-up through running sequencers builds each market's book, new engines (one process
    per market) are started, ``orders`` commands of the same mix per market (dealt to the ``markets`` in turn) are queued in
    one transaction, and the engines, rung at once, drain them. Orders per second is the commands divided by the
    time from the rings to the last one done; CPU per order is the engines', their backends' and PostgreSQL's in
    that time (no caller runs: what the callers cost is in the other sequencer cases). This is the engines'
    ceiling when callers run on other hosts; with four markets, how far a second core carries them."""
    from django.conf import settings
    from django.db import connections, transaction

    from apps.core import doorbell
    from apps.orders.models import Command, CommandStatus
    from apps.orders.store.commands import engine_channel

    flows, commands, engines = _warmed_up_and_queued(orders * markets, markets=markets)
    processes_stop(engines)
    engines = start_engines([flow.symbol for flow in flows], profile=engine_profile and f"{engine_profile}.backlog")
    try:
        with transaction.atomic():  # every market's backlog appears at once, engines already waiting
            Command.objects.bulk_create(commands, batch_size=1000)
        reading = _EngineCpu(engines)
        began = time.perf_counter()
        for flow in flows:
            doorbell.ring(engine_channel(flow.market_id))
        while Command.objects.filter(status=CommandStatus.PENDING).exists():
            time.sleep(0.01)
        elapsed = time.perf_counter() - began
        spent, machine_busy = reading.spent(), reading.machine_busy()
        connections.close_all()
    finally:
        processes_stop(engines)
    applied = len(commands)
    return {
        "bench": "matching",
        "case": name,
        "engine": "sequencer",
        "markets": markets,
        "workers": 0,
        "orders": applied,
        "orders_per_s": round(applied / elapsed, 1),
        "batch": settings.ORDERS_ENGINE_BATCH,
        "machine_busy": machine_busy,
        **_engine_figures(spent, applied),
    }


def sealed_reconcile():
    """``reconcile`` (its report) as it runs in a deployment, where beat seals the journal every few seconds and
    autovacuum keeps the planner's statistics: the bench has neither, so it analyzes the database and seals the
    journal first. Without statistics (a bench database is made afresh and filled within a minute, before
    autovacuum's first analysis) the planner took nested loops over every order and entry: reconciling after
    the 24,000-order paced case took 120 to 150 s, 4 s with them."""
    from django.core.management import call_command
    from django.db import connection

    from apps.ledger.reconciliation import reconcile

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    call_command("journal_seal", verbosity=0, stdout=io.StringIO())  # JSON lines only on stdout
    return reconcile()


def _engine_figures(spent: tuple[float, ...], count: int) -> dict:
    """The CPU per order (ms) of ``spent`` (the engine's, its backend's and PostgreSQL's seconds), the trades, and
    :func:`sealed_reconcile`, for the cases without callers."""
    from apps.orders.models import Trade

    report = sealed_reconcile()
    return {
        "server_cpu_ms": round(spent[0] / count * 1000, 3),
        "engine_backend_cpu_ms": round(spent[1] / count * 1000, 3),
        "postgres_cpu_ms": round(spent[2] / count * 1000, 3),
        "cores": os.cpu_count(),
        "trades": Trade.objects.count(),
        "reconcile_ok": report.ok,
        "reconcile_failed": [check.name for check in report.checks if not check.ok],
    }


PACED_REPLY = "bench_paced_reply"  # the reply channel of every command of the paced case


def paced_receiver(count: int, ready, results) -> None:
    """Subscribe to :data:`PACED_REPLY`, then record when each answer arrives (``{token: time.monotonic()}``)
    until ``count`` have, or nothing came for 30 s."""
    import redis
    from django.conf import settings

    setup_django()
    pubsub = redis.Redis.from_url(settings.REDIS_URL).pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(PACED_REPLY)
    pubsub.get_message(timeout=5)  # the confirmation
    ready.set()
    cpu = time.process_time()
    arrived: dict[str, float] = {}
    while len(arrived) < count:
        message = pubsub.get_message(timeout=30)
        if message is None:
            break
        arrived[message["data"].split(b" ", 1)[0].decode()] = time.monotonic()
    results.put((arrived, time.process_time() - cpu))


def run_paced_case(name: str, rate: int, orders: int, engine_profile: str | None = None) -> dict:
    """The engine fed at a fixed rate: a warm-up through the sequencer builds the book, then ``orders`` commands
    of the same mix are inserted at ``rate`` per second (one INSERT and one ring of the sequencer's doorbell every 2 ms: an open-loop load,
    as many independent clients make, costing the machine little), each naming one reply channel that a
    receiver process listens to. Latency is from a command's commit to its answer's arrival (what a caller
    waits, less its own CPU); orders per second is the commands divided by the time from the first commit to the
    last answer. ``engine_profile``: the engine is started again after the warm-up, under cProfile, writing to
    ``<engine_profile>.paced<rate>``."""
    from django.db import connections

    from apps.core import doorbell
    from apps.orders.models import Command
    from apps.orders.store.commands import engine_channel

    (paced,), commands, (engine,) = _warmed_up_and_queued(orders, reply_to=PACED_REPLY)
    if engine_profile:
        processes_stop([engine])
        (engine,) = start_engines([paced.symbol], profile=f"{engine_profile}.paced{rate}")
    try:
        context = multiprocessing.get_context("fork")
        ready, results = context.Event(), context.Queue()
        connections.close_all()
        receiver = context.Process(target=paced_receiver, args=(len(commands), ready, results))
        receiver.start()
        ready.wait(timeout=60)
        reading, cpu = _EngineCpu([engine]), time.process_time()
        submitted: dict[str, float] = {}
        tick = 0.002
        began = time.monotonic()
        sent = 0
        while sent < len(commands):
            due = min(len(commands), int((time.monotonic() - began) * rate) + 1)
            if due > sent:
                chunk = commands[sent:due]
                Command.objects.bulk_create(chunk)
                doorbell.ring(engine_channel(paced.market_id))
                at = time.monotonic()
                submitted.update((command.token, at) for command in chunk)
                sent = due
            time.sleep(max(0.0, began + sent / rate - time.monotonic(), tick / 4))
        arrived, receiver_cpu = results.get(timeout=120)
        receiver.join()
        spent, machine_busy = reading.spent(), reading.machine_busy()
        generator_cpu = time.process_time() - cpu + receiver_cpu
    finally:
        processes_stop([engine])
    latencies = sorted(arrived[token] - at for token, at in submitted.items() if token in arrived)
    elapsed = max(arrived.values()) - began
    count = len(submitted)
    return {
        "bench": "matching",
        "case": name,
        "engine": "sequencer",
        "markets": 1,
        "offered_per_s": rate,
        "orders": count,
        "answered": len(latencies),
        "orders_per_s": round(count / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2),
        "app_cpu_ms": round(generator_cpu / count * 1000, 3),  # the load generator and the receiver
        "machine_busy": machine_busy,  # the share of both cores busy: what is left for the engine to grow into
        **_engine_figures(spent, count),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=4000, help="timed requests per case (all workers)")
    parser.add_argument("--case", action="append", help="run only the named case(s)")
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="cProfile the first worker of each case into FILE (CPU time, time.process_time)",
    )
    parser.add_argument("--warmup", type=int, help="untimed requests per worker first (default 300)")
    parser.add_argument(
        "--profile-engine",
        metavar="FILE",
        help="cProfile the (first) run_engine process of each sequencer case into FILE.<engine> (CPU time; the paced "
        "cases: FILE.paced<rate>, from after the warm-up)",
    )
    parser.add_argument("--callers", type=int, default=8, help="caller processes per market in the sequencer cases")
    parser.add_argument(
        "--server-side-binding",
        action="store_true",
        help="what-if: run with DATABASES OPTIONS server_side_binding=True, prepare_threshold=5 "
        "(the project's settings use client-side binding)",
    )
    args = parser.parse_args()
    if args.warmup is not None:
        global WARMUP
        WARMUP = args.warmup
    if args.server_side_binding:
        os.environ["BENCH_SERVER_SIDE_BINDING"] = "1"

    admin_url, bench_url = bench_database_url("_bench")
    recreate_database(admin_url, bench_url)
    os.environ["DATABASE_URL"] = bench_url
    setup_django()
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)
    paced = {f"1 market, sequencer, paced {rate}/s": rate for rate in PACED_RATES}
    cases = [
        ("1 market", 1, 1, False, "inline"),
        ("1 market, 2 workers", 1, 2, False, "inline"),
        ("4 markets", 4, 4, False, "inline"),
        ("4 markets, shared users", 4, 4, True, "inline"),
        ("1 market, sequencer", 1, args.callers, False, "sequencer"),
        ("4 markets, sequencer", 4, 4 * args.callers, False, "sequencer"),
        ("1 market, sequencer per command", 1, args.callers, False, "sequencer_per_command"),
        ("1 market, sequencer, REST API", 1, args.callers, False, "rest"),
        ("1 market, sequencer, queued backlog", 1, 0, False, "backlog"),
        ("4 markets, sequencer, queued backlog", 4, 0, False, "backlog"),
        *((name, 1, 0, False, "paced") for name in paced),
    ]
    ok = True
    try:
        for name, markets, workers, shared, engine in cases:
            if args.case and name not in args.case:
                continue
            if engine == "backlog":
                figures = run_backlog_case(name, args.orders, markets, args.profile_engine)
            elif engine == "paced":
                figures = run_paced_case(
                    name, rate=paced[name], orders=max(args.orders, paced[name] * 4), engine_profile=args.profile_engine
                )
            else:
                figures = run_case(
                    name, markets, workers, shared, args.orders, args.profile, engine, args.profile_engine
                )
            ok &= figures["reconcile_ok"]
            print(json.dumps(figures, default=str), flush=True)
    finally:
        connections.close_all()
        recreate_database(admin_url, bench_url, drop_only=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
