"""The verdict commands with their database out of reach: exit 3 and one line, never 1 (the books are wrong)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("command", [["reconcile"], ["reconcile", "--json"], ["journal_verify", "--json"]])
def test_a_database_out_of_reach_is_exit_3_with_one_line_not_a_verdict(command):
    """Break-it review: it was exit 1 with a traceback, what a monitor reads as broken books."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        "DATABASE_URL": "postgres://exchange@/exchange?host=/nonexistent",
        "LOCAL_DATA_DIR": "/nonexistent",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith("CommandError: The database could not be reached (")
    assert result.stderr.rstrip().endswith("): no verdict on the books.") and "Traceback" not in result.stderr
