"""Ledger throughput against pgbench TPC-B on the same PostgreSQL, in the same run.

Several worker processes (not threads) post balanced transfers between 1,000
funded users, each a full ``transfer_create`` service call (resolve accounts, lock
them in order, check funds, idempotency key, entry, postings, balances, retry on
deadlock). Cases:

- ``uniform``: random pairs of users;
- ``hot``: every transfer also credits one shared fee account (fee revenue in one shard);
- ``hot_sharded``: the same with fee revenue split into the default number of shards.

Prints one JSON line per figure: ``{"bench": "ledger", ...}``. The bench uses its
own databases (``bench_ledger``, ``bench_pgbench``) on the server of ``DATABASE_URL``.
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
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

USERS = 1000
PROCESSES = int(os.environ.get("BENCH_PROCESSES", 4))
SECONDS = float(os.environ.get("BENCH_SECONDS", 10))
PGBENCH_CLIENTS = 4
PGBENCH_SCALE = 10


def database_url(name: str) -> str:
    """``DATABASE_URL`` with its database replaced by ``name``."""
    return urlsplit(os.environ["DATABASE_URL"])._replace(path=f"/{name}").geturl()


def recreate_database(name: str, *, create: bool = True) -> None:
    """Drop database ``name`` on the server of ``DATABASE_URL`` and (unless ``create`` is false) create it empty."""
    import psycopg

    from exchange.settings.environment import database_from_url

    config = database_from_url(os.environ["DATABASE_URL"])
    with psycopg.connect(
        host=config["HOST"],
        port=config.get("PORT") or None,
        user=config["USER"],
        password=config["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if create:
            conn.execute(f'CREATE DATABASE "{name}"')


def pgbench_binary() -> str:
    found = shutil.which("pgbench")
    if found:
        return found
    import pgserver

    return str(Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench")


def run_pgbench() -> float:
    from exchange.settings.environment import database_from_url

    recreate_database("bench_pgbench")
    config = database_from_url(os.environ["DATABASE_URL"])
    connection = ["-h", config["HOST"], "-U", config["USER"]] + (
        ["-p", str(config["PORT"])] if config.get("PORT") else []
    )
    env = {**os.environ, "PGPASSWORD": config["PASSWORD"] or ""}
    binary = pgbench_binary()
    subprocess.run(
        [binary, *connection, "-i", "-q", "-s", str(PGBENCH_SCALE), "bench_pgbench"],
        check=True,
        env=env,
        capture_output=True,
    )
    result = subprocess.run(
        [binary, *connection, "-c", str(PGBENCH_CLIENTS), "-j", "2", "-T", str(int(SECONDS)), "bench_pgbench"],
        check=True,
        env=env,
        capture_output=True,
        text=True,
    )
    match = re.search(r"tps = ([0-9.]+)", result.stdout)
    if match is None:
        raise SystemExit(f"pgbench printed no tps:\n{result.stdout}{result.stderr}")
    return float(match.group(1))


def setup_django(database: str) -> None:
    os.environ["DATABASE_URL"] = database_url(database)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exchange.settings.local")
    import django

    django.setup()


def prepare_ledger() -> tuple[list[int], int]:
    """Create the bench database with 1,000 users funded with 1,000,000 USDT each from equity; return user ids, asset id."""
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import transaction

    from apps.ledger.models import AccountKind, Asset, EntryReason
    from apps.ledger.services import credit, debit, entry_post, system_account, user_account

    call_command("migrate", verbosity=0)
    usdt = Asset.objects.create(code="USDT", name="Tether", decimals=6)
    User = get_user_model()
    users = User.objects.bulk_create([User(username=f"bench{n}") for n in range(USERS)])
    amount = Decimal(1_000_000)
    with transaction.atomic():
        accounts = [user_account(user.id, usdt) for user in users]
        entry_post(
            idempotency_key="bench:funding",
            reason=EntryReason.ADJUSTMENT,
            legs=[debit(system_account(AccountKind.EQUITY, usdt), amount * USERS)]
            + [credit(account, amount) for account in accounts],
        )
    return [user.id for user in users], usdt.id


def worker(case: str, user_ids: list[int], start_at: float, results) -> None:
    setup_django("bench_ledger")
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
    while time.time() < start_at:
        time.sleep(0.001)
    deadline = start_at + SECONDS
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


def run_case(case: str, user_ids: list[int]) -> dict:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    start_at = time.time() + 3  # let every process import Django first
    processes = [context.Process(target=worker, args=(case, user_ids, start_at, results)) for _ in range(PROCESSES)]
    for process in processes:
        process.start()
    latencies = [latency for _ in processes for latency in results.get()]
    for process in processes:
        process.join()
    latencies.sort()
    return {
        "transfers_per_s": round(len(latencies) / SECONDS, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
    }


def main() -> None:
    pgbench_tps = run_pgbench()
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
    recreate_database("bench_ledger")
    setup_django("bench_ledger")
    user_ids, _ = prepare_ledger()
    from django.db import connections

    connections.close_all()
    targets = {"uniform": 0.5, "hot": 0.4, "hot_sharded": 0.4}
    for case, target in targets.items():
        figures = run_case(case, user_ids)
        ratio = figures["transfers_per_s"] / pgbench_tps
        print(
            json.dumps(
                {
                    "bench": "ledger",
                    "figure": "transfers",
                    "case": case,
                    **figures,
                    "processes": PROCESSES,
                    "pgbench_tps": round(pgbench_tps, 1),
                    "ratio": round(ratio, 3),
                    "target_ratio": target,
                }
            ),
            flush=True,
        )
    from apps.ledger.reconciliation import reconcile

    report = reconcile()
    failed = [check.name for check in report.checks if not check.ok]
    print(json.dumps({"bench": "ledger", "figure": "reconcile", "ok": report.ok, "failed": failed}), flush=True)
    connections.close_all()
    for name in ("bench_ledger", "bench_pgbench"):
        recreate_database(name, create=False)
    if not report.ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
