"""``bench/liabilities.py`` end to end at a small scale: its fixture is a ledger the snapshot accepts.

The snapshot refuses stored balances that their postings do not account for; a fixture that wrote balances
without postings made the benchmark fail (and named every one of its accounts in the refusal).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from django.db import connection

from apps.wallets.tests.conftest import database_url

ROOT = Path(__file__).resolve().parents[2]


def test_the_liabilities_bench_builds_and_verifies_a_snapshot_of_its_fixture(transactional_db):
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env["DATABASE_URL"] = database_url(connection.settings_dict)  # its scratch database: <test database>_bench_...

    result = subprocess.run(
        [sys.executable, "bench/liabilities.py", "--users", "300", "--lookups", "5"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    build, lookup = (json.loads(line) for line in result.stdout.splitlines() if line.startswith("{"))
    # 300 users, each a leaf unless all three of its draws were zero (a fifth each), and the one its real entry funds.
    assert build["figure"] == "build" and 271 <= build["leaves"] <= 301
    assert lookup == {**lookup, "figure": "path_lookup", "lookups": 5, "all_verified": True}
