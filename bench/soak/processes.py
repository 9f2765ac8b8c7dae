"""Process control: the processes the soak starts (each in a group of its own, dying with the soak), the web
server, the streams, the Celery workers, and the database connections the fault injector terminates."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from devtools.procfile import procfile_arguments

from .common import ROOT, WEB_THREADS, WEB_WORKERS

if TYPE_CHECKING:
    from apps.streams.book import LocalBook

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Process:
    """A child process in a session (and process group) of its own, logging to a file; dies with this process."""

    def __init__(self, name: str, command: list[str], env: dict, log_path: Path):
        self.name, self.command, self.env, self.log_path = name, command, env, log_path
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        """Whether the process itself is still running."""
        return self.popen.poll() is None

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to every process of its group (a no-op once the group is gone)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL the whole group and reap the process."""
        self.signal_group(signal.SIGKILL)
        self.popen.wait()

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM the group, then SIGKILL it if the process has not exited within ``timeout`` seconds;
        whatever is left of the group is killed too."""
        if self.alive():
            self.signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=timeout)
        self.kill()

    def log_tail(self, chars: int = 3000) -> str:
        """The end of its log."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class Processes:
    """Every process the soak starts, so that all of them are stopped at the end, even on failure."""

    def __init__(self, env: dict, log_dir: Path):
        self.env, self.log_dir = env, log_dir
        self.started: list[Process] = []
        self.counts: Counter = Counter()

    def start(self, name: str, command: list[str], env: dict | None = None) -> Process:
        """Start ``command`` as process ``name`` (numbered when started again)."""
        self.counts[name] += 1
        label = name if self.counts[name] == 1 else f"{name}-{self.counts[name]}"
        process = Process(label, command, {**self.env, **(env or {})}, self.log_dir / f"{label}.log")
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        """Stop every process started (clients first, then the services)."""
        for process in reversed(self.started):
            process.stop(timeout=15)

    def left_running(self) -> list[str]:
        """Processes of any group the soak started that are still running (zombies aside)."""
        import psutil

        groups = {process.pid for process in self.started}
        left = []
        for candidate in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                if os.getpgid(candidate.pid) in groups and candidate.info["status"] != psutil.STATUS_ZOMBIE:
                    left.append(f"{candidate.pid} {' '.join(candidate.info['cmdline'] or [])[:100]}")
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return left


class Web:
    """The gunicorn server; the fault injector kills or restarts it."""

    def __init__(self, processes: Processes, port: int):
        self.processes, self.port = processes, port
        self.base_url = f"http://127.0.0.1:{port}"
        self.process: Process  # set by start()

    def start(self) -> None:
        """Start gunicorn on the port (workers x threads as in production, scaled down)."""
        self.process = self.processes.start(
            "web",
            [
                sys.executable,
                "-m",
                "gunicorn",
                "exchange.wsgi",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                str(WEB_WORKERS),
                "--threads",
                str(WEB_THREADS),
                "--graceful-timeout",
                "5",
                "--timeout",
                "60",
                "--log-level",
                "warning",
            ],
        )

    def restart(self, *, kill: bool) -> None:
        """Stop the server (SIGKILL of its group, or SIGTERM: a graceful stop) and start a new one."""
        if kill:
            self.process.kill()
        else:
            self.process.stop(timeout=15)
        self.start()

    def healthy(self) -> bool:
        """``GET /healthz`` answers 200 (database, Redis and a worker on our queue)."""
        import requests

        try:
            return requests.get(f"{self.base_url}/healthz", timeout=5).status_code == 200
        except requests.RequestException:
            return False


class Engine:
    """The matching engine: an active ``run_engine --all`` and a standby (blocked on the markets' advisory
    locks). The fault injector SIGKILLs the active one mid-batch: the standby takes over, and a new standby
    starts. A sequencer exits when its database connection is terminated (it may have lost its locks);
    :meth:`replenish` starts it again, as a supervisor would."""

    def __init__(self, processes: Processes):
        self.processes = processes
        self.sequencers: list[Process] = []

    def start_one(self) -> Process:
        sequencer = self.processes.start(
            f"engine-{len(self.sequencers)}", [sys.executable, "manage.py", "run_engine", "--all"]
        )
        self.sequencers.append(sequencer)
        return sequencer

    def running(self) -> list[Process]:
        return [s for s in self.sequencers if s.alive()]

    def replenish(self) -> None:
        """Two sequencers running (one active, one standby)."""
        while len(self.running()) < 2:
            self.start_one()

    def kill_active(self) -> None:
        """SIGKILL the oldest running sequencer (the active one: it took the locks first) and replenish."""
        running = self.running()
        if running:
            running[0].kill()
        self.replenish()

    def stop(self) -> None:
        for sequencer in self.running():
            sequencer.stop()


class Streams:
    """The streams: uvicorn serving WebSockets (``exchange.asgi``) and the relay; the fault injector kills the relay.

    A thread per market follows its depth stream with :class:`apps.streams.book.LocalBook`, starting
    again from a fresh snapshot whenever the connection drops or closes on a gap (``resyncs``).
    """

    def __init__(self, processes: Processes, port: int):
        self.processes, self.port = processes, port
        self.relay: Process  # set by start_relay()
        self.books: dict[str, LocalBook] = {}
        self.resyncs: Counter = Counter()
        self.stopped = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        command = [sys.executable, "-m", "uvicorn", *procfile_arguments("streams"), "--host", "127.0.0.1"]
        self.web = self.processes.start("streams", [*command, "--port", str(self.port), "--log-level", "warning"])
        self.start_relay()

    def start_relay(self) -> None:
        self.relay = self.processes.start("relay", [sys.executable, "manage.py", "run_stream_relay"])

    def kill_relay(self) -> None:
        """SIGKILL the relay (mid-round, its rows are published again) and start another."""
        self.relay.kill()
        self.start_relay()

    def alive(self) -> bool:
        return self.web.alive() and self.relay.alive()

    def follow(self, symbols: list[str], base_url: str) -> None:
        """Follow each market's depth stream in a thread of its own until :meth:`stop`."""
        for symbol in symbols:
            thread = threading.Thread(target=self._follow, args=(symbol, base_url), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _follow(self, symbol: str, base_url: str) -> None:
        import requests
        from websockets.exceptions import WebSocketException
        from websockets.sync.client import connect

        from apps.streams.book import Gap, LocalBook

        stream = f"ws://127.0.0.1:{self.port}/ws/{symbol.replace('-', '').lower()}@depth"
        while not self.stopped.is_set():
            book = LocalBook()
            try:
                with connect(stream, open_timeout=10) as connection:
                    while not self.stopped.is_set():
                        try:
                            book.on_event(json.loads(connection.recv(timeout=0.5)))
                        except TimeoutError:
                            pass
                        if book.last_update_id is None and book.buffer:
                            depth = requests.get(f"{base_url}/api/v1/markets/{symbol}/depth/?limit=1000", timeout=10)
                            book.snapshot(depth.json())
                        if book.last_update_id is not None:
                            self.books[symbol] = book
            except (OSError, WebSocketException, Gap, ValueError, requests.RequestException):
                pass
            if not self.stopped.is_set():
                self.resyncs[symbol] += 1
                time.sleep(0.5)

    def stop(self) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=10)


class WorkerPool:
    """Celery worker processes (prefork pool) on the soak's queue; the fault injector kills them."""

    def __init__(self, processes: Processes, queue: str, size: int, run: str):
        self.processes, self.queue, self.size, self.run = processes, queue, size, run
        self.workers: list[Process] = []
        self.serial = 0

    def start_one(self) -> Process:
        """Start one worker process with a pool of two."""
        self.serial += 1
        worker = self.processes.start(
            "worker",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "exchange",
                "worker",
                "--hostname",
                f"soak-{self.run}-w{self.serial}@%h",
                "--queues",
                self.queue,
                "--pool",
                "prefork",
                "--concurrency",
                "2",
                "--loglevel",
                "WARNING",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
        )
        self.workers.append(worker)
        return worker

    def replenish(self) -> None:
        """Start workers until ``size`` are running."""
        self.workers = [worker for worker in self.workers if worker.alive()]
        while len(self.workers) < self.size:
            self.start_one()

    def kill_worker(self, rng: random.Random) -> None:
        """SIGKILL a whole worker (main process and pool) and start a new one."""
        victim = rng.choice([worker for worker in self.workers if worker.alive()])
        victim.kill()
        self.replenish()

    def kill_pool_process(self, rng: random.Random) -> bool:
        """SIGKILL one pool process of a worker (the worker replaces it); False if none was found."""
        import psutil

        for worker in rng.sample(self.workers, len(self.workers)):
            try:
                children = psutil.Process(worker.pid).children()
            except psutil.Error:
                continue
            if children:
                try:
                    rng.choice(children).kill()
                except psutil.Error:
                    continue
                return True
        return False


def terminate_backends(admin_url: str, database: str) -> int:
    """``pg_terminate_backend`` every connection to ``database`` (the application's); return how many."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [database],
        ).fetchall()
    return sum(1 for (done,) in rows if done)
