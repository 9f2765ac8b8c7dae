"""Ledger throughput against pgbench TPC-B on the same PostgreSQL, in the same run.

Several worker processes (not threads) post balanced transfers between 1,000
funded users. In the first three cases each transfer is its own transaction, a full
``transfer_create`` service call (resolve accounts, lock them in order, check funds,
idempotency key, entry, postings, balances, retry on deadlock), called outside any transaction,
so one autocommit statement (``ledger_transfer_post_v2``):

- ``uniform``: random pairs of users;
- ``hot``: every transfer also credits one shared fee account (fee revenue in one shard);
- ``hot_sharded``: the same with fee revenue split into the default number of shards;
- ``batched``: ``entries_post`` of 100 random transfers per transaction (accounts resolved
  once per process, as a batching caller such as the matching engine holds them).

The figure ``transfer_function`` is the database's share of ``uniform`` alone: pgbench itself (a C client,
four connections) calls ``ledger_transfer_post_v2`` with the arguments ``transfer_create`` sends, so the gap
between it and ``uniform`` is what the Python client costs, and its ratio bounds what any client could reach.

Prints one JSON line per figure: ``{"bench": "ledger", ...}``; each case's ratio is to
pgbench TPC-B (``-s 10 -c 4``) measured in the same run. The bench uses its own scratch
databases (``<name>_bench_ledger``, ``<name>_bench_pgbench``, see ``bench/_scratch.py``)
on the server of ``DATABASE_URL``.
"""

import json
import multiprocessing
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._scratch import bench_database_url, recreate_database  # noqa: E402 (ROOT is on sys.path now)

USERS = 1000
PROCESSES = int(os.environ.get("BENCH_PROCESSES", 4))
SECONDS = float(os.environ.get("BENCH_SECONDS", 10))
PGBENCH_CLIENTS = 4
PGBENCH_SCALE = 10
BATCH = 100
UNBACKED_BY_DESIGN = frozenset({"entry_reasons_backed"})
"""Reconcile's checks left out of this bench's verdict: its ``transfer`` entries have no business record (see the
verdict in ``main``)."""


def pgbench_binary() -> str:
    found = shutil.which("pgbench")
    if found:
        return found
    import pgserver

    return str(Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench")


def _pgbench(url: str, *options: str) -> str:
    """Run ``pgbench`` on the database of ``url`` with ``options``; return what it printed."""
    from exchange.settings.environment import database_from_url

    config = database_from_url(url)
    connection = ["-h", config["HOST"], "-U", config["USER"]] + (
        ["-p", str(config["PORT"])] if config.get("PORT") else []
    )
    return subprocess.run(
        [pgbench_binary(), *connection, *options, config["NAME"]],
        check=True,
        env={**os.environ, "PGPASSWORD": config["PASSWORD"] or ""},
        capture_output=True,
        text=True,
    ).stdout


def _tps(output: str) -> float:
    """The tps a pgbench run printed."""
    match = re.search(r"tps = ([0-9.]+)", output)
    if match is None:
        raise SystemExit(f"pgbench printed no tps:\n{output}")
    return float(match.group(1))


def run_pgbench(admin_url: str, pgbench_url: str) -> float:
    """pgbench TPC-B (``-s 10 -c 4``) in its own database: the reference of every ratio."""
    recreate_database(admin_url, pgbench_url)
    _pgbench(pgbench_url, "-i", "-q", "-s", str(PGBENCH_SCALE))
    return _tps(_pgbench(pgbench_url, "-c", str(PGBENCH_CLIENTS), "-j", "2", "-T", str(int(SECONDS))))


# One uniform transfer as transfer_create sends it (services._transfer_post): the same function and arguments,
# the payload hash's JSON around the legs included, with a new key and two different random users of ids
# first..last. The destination is picked in pgbench's integer arithmetic: a prepared statement's variables are
# untyped, so SQL would compare them as text ('999' >= '1000') and sometimes name the source twice.
TRANSFER_FUNCTION_SCRIPT = """\
\\set s random({first}, {last})
\\set d random({first}, {last} - 1)
\\set d CASE WHEN :d >= :s THEN :d + 1 ELSE :d END
SELECT k.status FROM (SELECT gen_random_uuid()::text AS id) r, ledger_transfer_post_v2(
    'transfer:' || r.id, 'USDT', :s, :d,
    1.000001, 0, 0, ARRAY['1.000001', '-1.000001', ''], r.id, '{{}}', '{{"legs": ',
    ', "reason": "transfer", "reference": ["transfer", "' || r.id || '"]}}', NULL, now(), false) k;
"""


def run_transfer_function(
    url: str, user_ids: list[int], *, length: tuple[str, ...] = ("-T", str(int(SECONDS)))
) -> float:
    """The database's share alone: pgbench (``-c 4 -M prepared``) calling ``ledger_transfer_post_v2`` as the
    uniform case's ``transfer_create`` does, with no Python client; return its tps. ``user_ids`` must be
    consecutive (as ``bulk_create`` numbers them in a new database); ``length`` is pgbench's ``-T seconds`` or
    ``-t transactions`` (per client)."""
    first, last = min(user_ids), max(user_ids)
    if last - first + 1 != len(user_ids):
        raise SystemExit("the bench users' ids are not consecutive")
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(TRANSFER_FUNCTION_SCRIPT.format(first=first, last=last))
        script.flush()
        return _tps(_pgbench(url, "-n", "-M", "prepared", "-c", str(PROCESSES), "-j", "2", *length, "-f", script.name))


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exchange.settings.local")
    import django

    django.setup()


def prepare_ledger() -> tuple[list[int], int]:
    """Create the bench database with 1,000 users funded with 1,000,000 USDT each from equity; return user ids, asset id."""
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import transaction

    from apps.ledger.models import AccountKind, Asset
    from apps.ledger.services import credit, debit, system_account, user_account
    from bench._funding import capital_grant

    call_command("migrate", verbosity=0)
    usdt = Asset.objects.create(code="USDT", name="Tether", decimals=6)
    User = get_user_model()
    users = User.objects.bulk_create([User(username=f"bench{n}") for n in range(USERS)])
    amount = Decimal(1_000_000)
    with transaction.atomic():
        accounts = [user_account(user.id, usdt) for user in users]
        capital_grant(
            legs=[debit(system_account(AccountKind.EQUITY, usdt), amount * USERS)]
            + [credit(account, amount) for account in accounts],
            memo="Benchmark funding",
        )
    return [user.id for user in users], usdt.id


class _Start:
    """Starts every worker process at once, when all of them have set up Django (slow on a loaded machine)."""

    def __init__(self, context):
        self.ready = context.Queue()
        self.event = context.Event()
        self.at = context.Value("d", 0.0)

    def wait_until_go(self) -> float:
        """In a worker: say it is ready, wait for the others; return the start time (``time.time()``)."""
        self.ready.put(os.getpid())
        self.event.wait()
        while time.time() < self.at.value:
            time.sleep(0.001)
        return self.at.value

    def go(self, workers: int) -> None:
        """In the parent: once ``workers`` are ready, start them all 0.2 s from now."""
        for _ in range(workers):
            self.ready.get()
        self.at.value = time.time() + 0.2
        self.event.set()


def batched_worker(url: str, user_ids: list[int], start, results) -> None:
    """Post batches of ``BATCH`` transfers, one ``entries_post`` per transaction, until the deadline.

    Puts one latency per transfer (its batch's time divided by ``BATCH``, so the counts add up)."""
    setup_django(url)
    from decimal import Decimal

    from apps.ledger.models import Asset, EntryReason
    from apps.ledger.services import EntryRequest, credit, debit, entries_post, user_account
    from apps.ledger.transactions import retrying_atomic

    usdt = Asset.objects.get(code="USDT")
    accounts = [user_account(user_id, usdt) for user_id in user_ids]
    amount = Decimal("1.000001")
    post = retrying_atomic(entries_post)
    rng = random.Random()
    latencies = []
    deadline = start.wait_until_go() + SECONDS
    while (now := time.perf_counter()) and time.time() < deadline:
        batch = []
        for _ in range(BATCH):
            source, destination = rng.sample(accounts, 2)
            batch.append(
                EntryRequest(
                    idempotency_key=f"transfer:{uuid.uuid4()}",
                    reason=EntryReason.TRANSFER,
                    legs=[debit(source, amount), credit(destination, amount)],
                    reference_type="transfer",
                )
            )
        post(batch)
        latencies.extend([(time.perf_counter() - now) / BATCH] * BATCH)
    results.put(latencies)


def worker(url: str, case: str, user_ids: list[int], start, results) -> None:
    setup_django(url)
    from decimal import Decimal

    from django.conf import settings

    from apps.ledger.amounts import money
    from apps.ledger.services import transfer_create

    if case == "hot":
        settings.LEDGER_FEE_REVENUE_SHARDS = 1
    fee = Decimal("0.01") if case.startswith("hot") else Decimal(0)
    amount = money(Decimal("1.000001"), "USDT")
    rng = random.Random()
    latencies = []
    deadline = start.wait_until_go() + SECONDS
    while (now := time.perf_counter()) and time.time() < deadline:
        source, destination = rng.sample(user_ids, 2)
        transfer_create(
            source_user_id=source,
            destination_user_id=destination,
            amount=amount,
            transfer_id=str(uuid.uuid4()),
            fee=fee,
        )
        latencies.append(time.perf_counter() - now)
    results.put(latencies)


def run_case(url: str, case: str, user_ids: list[int]) -> dict:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    start = _Start(context)
    target, args = (batched_worker, (url,)) if case == "batched" else (worker, (url, case))
    processes = [context.Process(target=target, args=(*args, user_ids, start, results)) for _ in range(PROCESSES)]
    for process in processes:
        process.start()
    start.go(PROCESSES)
    latencies = [latency for _ in processes for latency in results.get()]
    for process in processes:
        process.join()
    latencies.sort()
    per = "transfer_in_batch_" if case == "batched" else ""
    return {
        "transfers_per_s": round(len(latencies) / SECONDS, 1),
        f"{per}p50_ms": round(statistics.median(latencies) * 1000, 2),
        f"{per}p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
    }


def main() -> None:
    admin_url, ledger_url = bench_database_url("_bench_ledger")
    _, pgbench_url = bench_database_url("_bench_pgbench")
    pgbench_tps = run_pgbench(admin_url, pgbench_url)
    print(
        json.dumps(
            {
                "bench": "ledger",
                "figure": "pgbench_tpcb",
                "tps": round(pgbench_tps, 1),
                "clients": PGBENCH_CLIENTS,
                "scale": PGBENCH_SCALE,
                "seconds": SECONDS,
            }
        ),
        flush=True,
    )
    recreate_database(admin_url, ledger_url)
    setup_django(ledger_url)
    user_ids, _ = prepare_ledger()
    from django.db import connections

    connections.close_all()
    function_tps = run_transfer_function(ledger_url, user_ids)
    print(
        json.dumps(
            {
                "bench": "ledger",
                "figure": "transfer_function",
                "case": "uniform",
                "client": "pgbench",
                "transfers_per_s": round(function_tps, 1),
                "processes": PROCESSES,
                "pgbench_tps": round(pgbench_tps, 1),
                "ratio": round(function_tps / pgbench_tps, 3),
            }
        ),
        flush=True,
    )
    targets = {"uniform": 0.6, "hot": 0.4, "hot_sharded": 0.4, "batched": 2.0}
    for case, target in targets.items():
        figures = run_case(ledger_url, case, user_ids)
        ratio = figures["transfers_per_s"] / pgbench_tps
        print(
            json.dumps(
                {
                    "bench": "ledger",
                    "figure": "transfers",
                    "case": case,
                    **figures,
                    "processes": PROCESSES,
                    **({"entries_per_transaction": BATCH} if case == "batched" else {}),
                    "pgbench_tps": round(pgbench_tps, 1),
                    "ratio": round(ratio, 3),
                    "target_ratio": target,
                }
            ),
            flush=True,
        )
    from apps.ledger.reconciliation import reconcile
    from apps.ledger.seal.services import journal_seal

    journal_seal()  # what the scheduled sealer does in production: invariant 9 holds for entries older than a minute
    report = reconcile()
    # The transfers between users this bench posts have no business record (no production code posts them, so no
    # model records one): the check that flags entries of such reasons is left out of the verdict, by name. Every
    # other check counts, the backing of the funding (approved adjustments) included.
    failed = [check.name for check in report.checks if not check.ok and check.name not in UNBACKED_BY_DESIGN]
    ok = not failed
    print(json.dumps({"bench": "ledger", "figure": "reconcile", "ok": ok, "failed": failed}), flush=True)
    connections.close_all()
    for url in (ledger_url, pgbench_url):
        recreate_database(admin_url, url, drop_only=True)
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
