"""Proof of liabilities at scale: snapshot build time, peak memory and path lookups (PROOFS.md section 2).

``--users`` users (default 1,000,000) each hold three assets (BTC 8, ETH 18, USDT 6 decimals;
a fifth of the balances zero, a tenth of the users with held funds as well). The fixture rows
(users and accounts with their balances) are written straight into a scratch database
(``bench_liabilities`` on the server of ``DATABASE_URL``) by SQL, each non-zero balance backed by one
posting of an opening entry (:data:`_OPENING`), as the snapshot checks before it builds (stored balances
against postings: a cost ``build`` includes). The fixture, its sealing included, is made in a child process, so
the peak memory measured is the snapshot's.

Figures, one JSON line each (``{"bench": "liabilities", ...}``):

- ``build``: ``liabilities_snapshot_take()`` wall time and the process's peak resident memory,
  against a reference measured in the same run: reading the same account rows through a
  server-side cursor into Python (the floor any builder pays); targets 60 s and 2 GB at 1M users.
  ``balance_check_s`` is the share of the build spent checking stored balances against postings, timed on its own
  before it;
- ``path_lookup``: p50/p99 of ``liabilities_proof(user)`` for random users, each proof then
  checked by ``tools/verify_liabilities.py``.
"""

import argparse
import json
import multiprocessing
import random
import resource
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ledger import setup_django  # noqa: E402  (the ledger bench's Django set-up)

from bench._scratch import bench_database_url, recreate_database  # noqa: E402 (ROOT is on sys.path now)

_USERS = """
    INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email, is_staff, is_active,
                           date_joined)
    SELECT '!', false, 'bench' || n, '', '', '', false, true, now() FROM generate_series(1, %s) AS n
"""
_ACCOUNTS = """
    INSERT INTO ledger_account (kind, owner_id, asset_id, shard, balance, version, created_at)
    SELECT %s, u.id, a.id, 0,
           CASE WHEN random() < %s THEN 0 ELSE round((random() * %s)::numeric, a.decimals) END, 0, now()
    FROM auth_user u CROSS JOIN ledger_asset a
    WHERE u.username LIKE 'bench%%' AND u.id %% %s = 0
"""
# Every non-zero customer balance of one asset credited by an opening entry per OPENING_CHUNK accounts, each debiting
# the asset's equity account by its total (one statement: entries and postings together, as the ledger's triggers
# require); then the accounts' versions and the equity balance follow their postings (reconciliation's invariant 2).
_OPENING = """
    WITH legs AS (
        SELECT a.id AS account_id, a.balance, (row_number() OVER (ORDER BY a.id) - 1) / %(chunk)s AS chunk
        FROM ledger_account a
        WHERE a.asset_id = %(asset)s AND a.owner_id IS NOT NULL AND a.balance <> 0
    ), chunks AS (
        SELECT chunk, sum(balance) AS total, sum(sum(balance)) OVER (ORDER BY chunk) AS running
        FROM legs GROUP BY chunk
    ), entries AS (
        INSERT INTO ledger_journalentry (idempotency_key, reason, reference_type, reference_id, metadata,
                                         payload_hash, created_at)
        SELECT 'bench:opening:' || %(asset)s || ':' || chunk, 'adjustment', 'bench', chunk::text, '{}', '', now()
        FROM chunks
        RETURNING id, reference_id::bigint AS chunk
    )
    INSERT INTO ledger_posting (entry_id, account_id, asset_id, amount, balance_after)
    SELECT e.id, l.account_id, %(asset)s, -l.balance, l.balance FROM legs l JOIN entries e USING (chunk)
    UNION ALL
    SELECT e.id, %(equity)s, %(asset)s, c.total, -c.running FROM chunks c JOIN entries e USING (chunk)
"""
_OPENED = """
    UPDATE ledger_account a SET version = 1 WHERE a.asset_id = %(asset)s AND a.owner_id IS NOT NULL AND a.balance <> 0;
    UPDATE ledger_account a
    SET balance = -t.total, version = t.postings
    FROM (SELECT sum(amount) AS total, count(*) AS postings FROM ledger_posting WHERE account_id = %(equity)s) t
    WHERE a.id = %(equity)s
"""
OPENING_CHUNK = 10_000


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def prepare(users: int) -> None:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection, transaction

    from apps.ledger.models import AccountKind, Asset, EntryReason
    from apps.ledger.seal.services import journal_seal
    from apps.ledger.services import credit, debit, entry_post, system_account, user_account

    call_command("migrate", verbosity=0)
    for code, decimals in (("BTC", 8), ("ETH", 18), ("USDT", 6)):
        Asset.objects.create(code=code, name=code, decimals=decimals)
    with connection.cursor() as cursor:
        cursor.execute(_USERS, [users])
        cursor.execute(_ACCOUNTS, [AccountKind.USER_AVAILABLE, 0.2, 1000, 1])
        cursor.execute(_ACCOUNTS, [AccountKind.USER_HELD, 0.5, 100, 10])
        for asset in Asset.objects.all():
            opening = {
                "asset": asset.id,
                "equity": system_account(AccountKind.EQUITY, asset).id,
                "chunk": OPENING_CHUNK,
            }
            cursor.execute(_OPENING, opening)
            cursor.execute(_OPENED, opening)
        cursor.execute("ANALYZE")
    usdt = Asset.objects.get(code="USDT")
    funded = get_user_model().objects.create(username="funded")
    with transaction.atomic():
        entry_post(
            idempotency_key="bench:funding",
            reason=EntryReason.ADJUSTMENT,
            legs=[
                debit(system_account(AccountKind.EQUITY, usdt), Decimal(1)),
                credit(user_account(funded.id, usdt), Decimal(1)),
            ],
        )
    journal_seal()


def prepare_in_child(url: str, users: int) -> None:
    """:func:`prepare` in a child process: sealing the opening entries loads their postings, a peak of memory
    that is not the snapshot's."""
    setup_django(url)
    prepare(users)


def read_reference() -> float:
    """Seconds to read every user account row into Python through a server-side cursor."""
    from django.db import connection, transaction

    started = time.perf_counter()
    with transaction.atomic(), connection.connection.cursor(name="reference") as cursor:
        cursor.itersize = 20000
        cursor.execute(
            "SELECT owner_id, asset_id, balance FROM ledger_account WHERE owner_id IS NOT NULL ORDER BY owner_id"
        )
        for _ in cursor:
            pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=200)
    args = parser.parse_args()

    admin_url, bench_url = bench_database_url("_bench_liabilities")
    recreate_database(admin_url, bench_url)
    preparing = multiprocessing.get_context("spawn").Process(target=prepare_in_child, args=(bench_url, args.users))
    preparing.start()
    preparing.join()
    if preparing.exitcode != 0:
        raise SystemExit(f"preparing the fixture failed (exit {preparing.exitcode})")
    setup_django(bench_url)

    from django.db import connections

    from apps.ledger.seal.keys import public_keys
    from apps.ledger.selectors import customer_balances_not_matching_postings
    from apps.proofs.models import LiabilityLeaf
    from apps.proofs.selectors import liabilities_proof
    from apps.proofs.services import liabilities_snapshot_take
    from tools.verify_liabilities import verify

    reference = read_reference()
    started = time.perf_counter()
    if customer_balances_not_matching_postings():
        raise SystemExit("the fixture's stored balances are not the sums of its postings")
    balance_check = time.perf_counter() - started
    memory_before = peak_rss_mb()
    started = time.perf_counter()
    snapshot = liabilities_snapshot_take()
    build = time.perf_counter() - started
    print(
        json.dumps(
            {
                "bench": "liabilities",
                "figure": "build",
                "users": args.users,
                "assets": len(snapshot.assets),
                "leaves": snapshot.leaf_count,
                "build_s": round(build, 2),
                "read_reference_s": round(reference, 2),
                "balance_check_s": round(balance_check, 2),  # part of build_s, measured once on its own first
                "ratio_to_reference": round(build / reference, 2),
                "peak_rss_mb": round(peak_rss_mb(), 1),
                "peak_rss_before_build_mb": round(memory_before, 1),
                "target_s": 60,
                "target_mb": 2048,
            }
        ),
        flush=True,
    )

    keys = {"keys": [{"key_id": k.key_id, "public_key": k.public_key} for k in public_keys()]}
    user_ids = list(
        LiabilityLeaf.objects.filter(snapshot=snapshot).order_by("?").values_list("user_id", flat=True)[: args.lookups]
    )
    timings = []
    for user_id in user_ids:
        started = time.perf_counter()
        proof = liabilities_proof(user_id)
        timings.append((time.perf_counter() - started) * 1000)
        verify(proof, keys)
    timings.sort()
    print(
        json.dumps(
            {
                "bench": "liabilities",
                "figure": "path_lookup",
                "lookups": len(timings),
                "path_length": len(proof["path"]),
                "p50_ms": round(statistics.median(timings), 2),
                "p99_ms": round(timings[min(len(timings) - 1, int(len(timings) * 0.99))], 2),
                "all_verified": True,
            }
        ),
        flush=True,
    )
    connections.close_all()
    recreate_database(admin_url, bench_url, drop_only=True)


if __name__ == "__main__":
    random.seed(0)
    main()
