"""``make run`` holds its data folder for its whole life, clean-up included (devtools.run.one_run_at_a_time),
``make stop`` stops a running one first (not its services under it), and ``make run`` refuses ports another server holds."""

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from devtools.localservices import RUN_LOCK, STOP_REQUEST

ROOT = Path(__file__).resolve().parent.parent.parent

HOLD = """
import sys
from pathlib import Path
from devtools.run import one_run_at_a_time
with one_run_at_a_time(Path(sys.argv[1])):
    print("entered", flush=True)
    sys.stdin.read()  # until the test closes it: a run still going, or still stopping
"""


def _run(folder: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_second_run_waits_saying_so_until_the_first_has_stopped(tmp_path):
    """A run started while a crashed one was still stopping had its services stopped under it."""
    first = _run(tmp_path)
    assert first.stdout.readline() == "entered\n"
    second = _run(tmp_path)
    try:
        assert second.stdout.readline().startswith(
            f"Another `make run` is using {tmp_path} (running, or still stopping)"
        )
        assert second.poll() is None  # waiting: it has not entered
        assert (tmp_path / RUN_LOCK).read_text() == str(first.pid)  # what `make stop` stops: not erased meanwhile

        first.communicate("", timeout=30)  # the first one ends

        assert second.stdout.readline() == "entered\n"
        assert (tmp_path / RUN_LOCK).read_text() == str(second.pid)
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=30)


def test_make_stop_stops_a_run_holding_the_folder_first(tmp_path):
    """Break-it reviews: ``make stop`` beside a running ``make run`` stopped PostgreSQL and Redis under it (every
    process it ran failed with tracebacks); then it refused, and a ``make run`` left in the background could not be
    stopped by the command the README gives. It now asks the run to stop (SIGTERM: the run stops its processes and
    its services) and waits for it to let go of the folder."""
    stop = [sys.executable, "-m", "devtools.localservices", "stop"]
    env = {**os.environ, "LOCAL_DATA_DIR": str(tmp_path)}
    run = _run(tmp_path)
    try:
        assert run.stdout.readline() == "entered\n"
        assert (tmp_path / RUN_LOCK).read_text() == str(run.pid)
        stopped = subprocess.run(stop, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
        run.wait(timeout=30)

    assert run.returncode == -signal.SIGTERM
    assert (stopped.returncode, stopped.stderr) == (0, "")
    assert stopped.stdout == f"Stopping the `make run` using {tmp_path} (process {run.pid}).\n"


def test_make_stop_also_stops_a_run_waiting_for_the_folder(tmp_path):
    """Break-it review: with a second ``make run`` waiting, ``make stop`` stopped the first, the second took the folder
    at once and started everything again, and ``make stop`` gave up after 60 s. The waiting run now gives up too;
    a run started after the stop starts as usual."""
    stop = [sys.executable, "-m", "devtools.localservices", "stop"]
    env = {**os.environ, "LOCAL_DATA_DIR": str(tmp_path)}
    first = _run(tmp_path)
    assert first.stdout.readline() == "entered\n"
    waiting = subprocess.Popen(
        [sys.executable, "-m", "devtools.run"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert waiting.stdout.readline().startswith(f"Another `make run` is using {tmp_path}")
        stopped = subprocess.run(stop, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
        _, errors = waiting.communicate(timeout=60)
    finally:
        for process in (first, waiting):
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=30)

    assert stopped.returncode == 0 and first.returncode == -signal.SIGTERM
    assert (waiting.returncode, errors) == (
        1,
        "`make stop` stopped the run this one was waiting for: not starting (`make run` starts it again).\n",
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == [RUN_LOCK, STOP_REQUEST]  # nothing started
    holder, later = _run(tmp_path), None  # a run waiting after the stop: the request is older than its wait
    try:
        assert holder.stdout.readline() == "entered\n"
        later = _run(tmp_path)
        assert later.stdout.readline().startswith(f"Another `make run` is using {tmp_path}")
        holder.communicate("", timeout=30)
        assert later.stdout.readline() == "entered\n"
    finally:
        for process in (holder, later):
            if process is not None and process.poll() is None:
                process.communicate("", timeout=30)


def test_make_run_refuses_ports_another_server_listens_on_before_starting_anything(tmp_path):
    """A CCXT review: with port 8000 taken by another copy of the exchange, ``make run`` printed its addresses,
    its web server died and honcho stopped everything, but its custody simulator had already delivered its signed
    callbacks to the other copy (same development secret), which took them as its own."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        env = {**os.environ, "LOCAL_DATA_DIR": str(tmp_path), "WEB_PORT": str(port), "STREAMS_PORT": str(port)}
        env.pop("DATABASE_URL", None)
        env.pop("REDIS_URL", None)

        run = subprocess.run(
            [sys.executable, "-m", "devtools.run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )

    assert run.returncode == 1
    assert f"Port {port} on 127.0.0.1 is in use" in run.stderr
    assert "Traceback" not in run.stderr and "Exchange:" not in run.stdout
    assert sorted(path.name for path in tmp_path.iterdir()) == [RUN_LOCK]  # no database, no Redis started
