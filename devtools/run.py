"""``make run``: the whole exchange on this machine, with demo data, under one process manager.

Starts the embedded PostgreSQL and Redis unless ``DATABASE_URL`` / ``REDIS_URL`` are set,
migrates, loads the demo data (idempotent), prints where to go, then runs the Procfile
under honcho: web server, the streams' ASGI server (uvicorn, on ``STREAMS_PORT``, by default
the web port plus one) and relay, the matching engine's sequencer (``run_engine --all``: every
market, those an operator creates while it runs included; ``ORDERS_ENGINE=sequencer``), Celery worker, Celery beat, the
simulated custody's confirmation loop and the market-making bot. Ctrl-C stops every process; the embedded services this
run started are stopped too (the data stays in the data folder until ``make reset``).
"""

import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devtools import localservices
from exchange.settings.environment import DEV_CUSTODY_WEBHOOK_SECRET

ROOT = Path(__file__).resolve().parent.parent


class StoppedWhileWaiting(Exception):
    """``make stop`` was asked while this run waited for the data folder: it does not start (break-it review: the
    waiting run took the folder as soon as ``make stop`` had stopped the first, and started everything again)."""


def _stop_requested_since(folder: Path, since: float) -> bool:
    try:
        return (folder / localservices.STOP_REQUEST).stat().st_mtime >= since
    except FileNotFoundError:
        return False


@contextmanager
def one_run_at_a_time(folder: Path) -> Iterator[None]:
    """Hold ``folder/run.lock`` (``flock``) for the whole of a ``make run``, its clean-up included; ``make stop``
    stops the run holding it first (SIGTERM to the pid it records). A second run on the same data folder waits, saying so,
    until the first has stopped (and does not start if ``make stop`` was asked meanwhile, :class:`StoppedWhileWaiting`):
    started while the first was still stopping (after a crash), it saw the services up, so it would not start them,
    and the first then stopped them under it (its migrate failed with a traceback and a redis-server was left
    behind)."""
    with open(folder / localservices.RUN_LOCK, "a+") as handle:  # not "w": that would erase the holder's pid
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"Another `make run` is using {folder} (running, or still stopping): waiting for it to end "
                "(Ctrl-C to give up).",
                flush=True,
            )
            waiting_since = time.time()
            fcntl.flock(handle, fcntl.LOCK_EX)
            if _stop_requested_since(folder, waiting_since):
                raise StoppedWhileWaiting(
                    "`make stop` stopped the run this one was waiting for: not starting (`make run` starts it again)."
                ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))  # whom ``make stop`` asks to stop (localservices.run_holder)
        handle.flush()
        yield


def ports_in_use(ports: list[int], host: str = "127.0.0.1") -> list[int]:
    """Those of ``ports`` on ``host`` that a server already listens on (binding them fails; ``SO_REUSEADDR`` so
    that connections of a server that has just stopped do not count)."""
    taken = []
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError:
                taken.append(port)
    return taken


def main() -> int:
    try:
        with one_run_at_a_time(localservices.data_dir()):
            return _run()
    except StoppedWhileWaiting as stopped:
        print(stopped, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _run() -> int:
    port = os.environ.setdefault("WEB_PORT", "8000")
    streams_port = os.environ.setdefault("STREAMS_PORT", str(int(port) + 1))
    os.environ.setdefault("STREAMS_URL", f"ws://127.0.0.1:{streams_port}")  # where the pages open the streams
    taken = ports_in_use(sorted({int(port), int(streams_port)}))
    if taken:
        # Started anyway, the web server died at once and honcho stopped everything, but not before this run's
        # custody simulator had sent its signed callbacks to the other server (the same development secret).
        print(
            f"{'Ports' if len(taken) > 1 else 'Port'} {' and '.join(map(str, taken))} on 127.0.0.1 "
            f"{'are' if len(taken) > 1 else 'is'} in use (another `make run`, or another server): "
            f"stop it, or choose other ports, e.g. `WEB_PORT={int(port) + 100} make run` (the streams take the "
            "next port).",
            file=sys.stderr,
        )
        return 1
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exchange.settings.local")
    os.environ.setdefault("ORDERS_ENGINE", "sequencer")  # placements go to the Procfile's engine process
    os.environ.setdefault("LOCAL_DATA_DIR", str(localservices.data_dir()))
    already_running = localservices.running()
    env = {**os.environ, **localservices.service_env(), "PYTHONUNBUFFERED": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    manage = [sys.executable, "manage.py"]
    try:
        subprocess.run([*manage, "migrate", "--no-input", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
        subprocess.run([*manage, "seed_demo"], cwd=ROOT, env=env, check=True)
        admin = os.environ.get("DJANGO_ADMIN_URL", "admin/")
        print(
            f"\nExchange:    http://127.0.0.1:{port}/\n"
            f"Back office: http://127.0.0.1:{port}/{admin}\n"
            f"API docs:    http://127.0.0.1:{port}/api/docs/\n"
            f"Streams:     ws://127.0.0.1:{streams_port}/ws/btcusdt@depth (or /stream?streams=...)\n"
            f"Custody webhook secret (development): {env.get('CUSTODY_WEBHOOK_SECRET', DEV_CUSTODY_WEBHOOK_SECRET)}\n"
            "Ctrl-C stops everything.\n",
            flush=True,
        )
        honcho = subprocess.Popen([sys.executable, "-m", "honcho", "start", "-f", "Procfile"], cwd=ROOT, env=env)
        # Ctrl-C reaches honcho too: it stops its processes; wait for it to finish doing so.
        stopped: list[int] = []

        def on_signal(number: int, _frame) -> None:
            stopped.append(number)
            if number == signal.SIGTERM:
                honcho.terminate()

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        returncode = honcho.wait()
        return 0 if stopped else returncode
    finally:
        if not already_running:
            localservices.stop()


if __name__ == "__main__":
    sys.exit(main())
