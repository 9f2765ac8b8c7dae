"""The soak of ``bench/soak/``, short: about 20 s of load while every kind of fault happens, then nothing lost.

It runs the real thing in processes of its own (gunicorn, Celery workers and beat, the simulated
custody, trader and approver clients) against a scratch database and queue, which it drops;
this test only reads its JSON lines. Every wait in it has a deadline; nothing is timed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOAK_TIMEOUT = 900  # seconds: the soak bounds itself well below this (retries, drain)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def soak() -> dict:
    """Run a short soak; return its figures by name (``checks`` as a list) and its exit status."""
    # DATABASE_URL and REDIS_URL: the test run's server (without them the soak starts the embedded services).
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    soak = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.soak",
            "--duration",
            "20",
            "--traders",
            "2",
            "--fault-interval",
            "3",
            "--drain-timeout",
            "180",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = soak.communicate(timeout=SOAK_TIMEOUT)
    except subprocess.TimeoutExpired:
        soak.terminate()  # it stops its processes and drops its database
        stdout, stderr = soak.communicate(timeout=120)
    figures: dict = {"checks": [], "returncode": soak.returncode, "stderr": stderr[-4000:]}
    for line in stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            if row["figure"] == "check":
                figures["checks"].append(row)
            else:
                figures[row["figure"]] = row
    assert "result" in figures, f"the soak printed no result:\n{stdout[-4000:]}\n{stderr[-4000:]}"
    return figures


def test_the_short_soak_loses_nothing_and_reconciles(soak):
    result = soak["result"]
    assert result["lost"] == 0, result["lost_details"]
    assert result["problems"] == [], result["problems"]
    failed = [check for check in soak["checks"] if not check["ok"]]
    assert failed == [], failed
    assert {check["name"] for check in soak["checks"]} >= {
        "reconcile",
        "inbox",
        "callbacks",
        "deposits",
        "forged_callbacks",
        "orders",
        "order_holds",
        "withdrawals",
        "stream_books",
    }
    assert result["left_running"] == []
    assert soak["returncode"] == 0, soak["stderr"]


def test_the_short_soak_injected_every_kind_of_fault(soak):
    injected = soak["faults"]["injected"]
    kinds = ("worker_killed", "worker_process_killed", "db_connections_terminated", "web_killed", "web_restarted")
    for kind in (*kinds, "relay_killed"):
        assert injected.get(kind, 0) >= 1, injected
    assert soak["faults"]["errors"] == []


def test_the_short_soak_drove_the_whole_mix(soak):
    acknowledged = soak["operations"]["acknowledged"]
    for kind in (
        "order_limit",
        "order_market",
        "order_cancel",
        "withdrawal",
        "decision",
        "callback",
        "callback_replay",
    ):
        assert acknowledged.get(kind, 0) >= 1, (kind, acknowledged)
    assert soak["operations"]["refused"].get("forged_callback", 0) >= 1
    checked = {check["name"]: check["checked"] for check in soak["checks"]}
    assert checked["deposits"] >= 1 and checked["orders"] >= 1 and checked["withdrawals"] >= 1
