"""Live processes for the streams' tests: uvicorn serving ``exchange.asgi`` and the relay.

Each is a real subprocess (its own process group, killed with the pytest process) against the
test database and Redis, with the test session's channel prefix, logging to a file.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

from apps.wallets.tests.conftest import _die_with_parent, database_url
from devtools.procfile import procfile_arguments

ROOT = Path(settings.BASE_DIR)
START_TIMEOUT = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def process_env() -> dict[str, str]:
    """The environment of a live process: the test database and Redis, this session's channels."""
    channel_prefix: str = settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "exchange.settings.test",
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": settings.REDIS_URL,
        "STREAMS_CHANNEL_PREFIX": channel_prefix,
        "CELERY_TASK_DEFAULT_QUEUE": settings.CELERY_TASK_DEFAULT_QUEUE,
        "PYTHONUNBUFFERED": "1",
    }


class LiveProcess:
    """A subprocess started with ``command``, ready once ``ready`` appears in its log."""

    def __init__(self, command: list[str], *, log_path: Path, ready: str, env: dict[str, str] | None = None):
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                env={**process_env(), **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while ready not in self.log():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{command[2:4]} did not start:\n{self.log()[-4000:]}")
            time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def start_web(log_dir: Path, name: str, env: dict[str, str] | None = None) -> tuple[LiveProcess, str]:
    """uvicorn serving HTTP and WebSockets on a free port with the Procfile's options (``env``: settings of its
    own); returns it and its ``host:port``."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", *procfile_arguments("streams"), "--host", "127.0.0.1"]
    command += ["--port", str(port), "--ws", "websockets"]
    process = LiveProcess(command, log_path=log_dir / f"{name}.log", ready="Uvicorn running", env=env)
    return process, f"127.0.0.1:{port}"


def start_relay(log_dir: Path, name: str = "relay", env: dict[str, str] | None = None) -> LiveProcess:
    """``manage.py run_stream_relay``, ready once it holds the relay lock (``env``: settings of its own)."""
    command = [sys.executable, "manage.py", "run_stream_relay"]
    return LiveProcess(command, log_path=log_dir / f"{name}.log", ready="stream relay active", env=env)
