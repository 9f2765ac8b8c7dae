"""``bench/_scratch.py``: a benchmark's Django runs without the sealer's head witness.

A benchmark flushes its scratch database between cases; with the witness on, the second case's
``journal_seal`` refused to seal ("the chain has no block 1 ... blocks were deleted") and ``make bench`` stopped.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_AFTER_SCRATCH_URL = """
from bench._scratch import bench_database_url
bench_database_url("_scratch_test")
import django
django.setup()
from django.conf import settings
print(settings.LEDGER_SEAL_HEAD_WITNESS)
"""


def test_a_benchmarks_settings_have_the_head_witness_off():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "exchange.settings.local", "LEDGER_SEAL_HEAD_WITNESS": "true"}
    env.setdefault("DATABASE_URL", "postgres://127.0.0.1:1/unused")  # read, never connected to

    done = subprocess.run(
        [sys.executable, "-c", SETTINGS_AFTER_SCRATCH_URL], cwd=ROOT, env=env, capture_output=True, text=True
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
