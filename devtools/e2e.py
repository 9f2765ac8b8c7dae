"""End-to-end check of ``make run`` (``make e2e``; ``.ci/run`` runs it after ``make test``).

In a data folder and port of its own it starts ``make run`` in the background, waits for
``/healthz``, logs in as the demo trader alice through the API, waits for her funding
deposits, places a marketable order against the market-making bot and sees the trade and
her balances change, requests a withdrawal below the auto-approval limit and sees it
completed through the simulated custody and the worker, runs ``manage.py reconcile``
(exit 0), stops everything with Ctrl-C (SIGINT) and checks that no process it started
is left. Prints one JSON line of figures; exits 1 on the first failure. Bounded to 5 minutes.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import psutil
import requests
from django_otp.oath import totp

from apps.demo.credentials import DEMO_TOTP_KEYS

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = time.monotonic() + 300
PASSWORD = "alice-demo-2026"


class Failure(Exception):
    pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(what: str, probe, timeout: float):
    """Poll ``probe()`` until it returns something truthy; raise :class:`Failure` after ``timeout`` seconds."""
    until = min(time.monotonic() + timeout, DEADLINE)
    while time.monotonic() < until:
        try:
            result = probe()
        except requests.RequestException:
            result = None
        if result:
            return result
        time.sleep(0.5)
    raise Failure(f"timed out waiting for {what}")


class Exchange:
    """A ``make run`` in its own session, data folder and port."""

    def __init__(self, data_dir: Path, port: int, log_path: Path):
        self.data_dir = data_dir
        self.base = f"http://127.0.0.1:{port}"
        self.env = {**os.environ, "LOCAL_DATA_DIR": str(data_dir), "WEB_PORT": str(port)}
        for name in ("DATABASE_URL", "REDIS_URL"):  # always the embedded services of this data folder
            self.env.pop(name, None)
        self.log = open(log_path, "wb")
        self.process = subprocess.Popen(
            ["make", "run"], cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.session = os.getsid(self.process.pid)

    def url(self, path: str) -> str:
        return f"{self.base}/api/v1/{path}"

    def session_processes(self) -> list[psutil.Process]:
        found = []
        for process in psutil.process_iter(["pid"]):
            try:
                if os.getsid(process.pid) == self.session:
                    found.append(process)
            except (ProcessLookupError, PermissionError):
                continue
        return found

    def data_dir_processes(self) -> list[psutil.Process]:
        """Embedded PostgreSQL and Redis of this data folder (they run in sessions of their own)."""
        found = []
        for process in psutil.process_iter(["cmdline"]):
            if any(str(self.data_dir) in part for part in (process.info["cmdline"] or [])):
                found.append(process)
        return found

    def stop(self) -> list[str]:
        """Ctrl-C (SIGINT to the session), wait for ``make run`` to end; return what is left running."""
        if self.process.poll() is None:
            os.killpg(self.session, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=90)
        time.sleep(1)
        leftovers = [
            f"{p.pid} {' '.join(p.cmdline())[:120]}"
            for p in self.session_processes() + self.data_dir_processes()
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        ]
        for process in self.session_processes() + self.data_dir_processes():
            process.kill()
        self.log.close()
        return leftovers


def balances(client: requests.Session, exchange: Exchange) -> dict[str, Decimal]:
    rows = client.get(exchange.url("balances/"), timeout=10).json()
    return {row["asset"]: Decimal(row["available"]) for row in rows}


def scenario(exchange: Exchange, figures: dict) -> None:
    started = time.monotonic()
    wait_for("/healthz 200", lambda: requests.get(f"{exchange.base}/healthz", timeout=5).status_code == 200, 240)
    figures["seconds_to_healthy"] = round(time.monotonic() - started, 1)

    otp = f"{totp(bytes.fromhex(DEMO_TOTP_KEYS['alice'])):06d}"  # seed_demo enrols alice's authenticator
    token = requests.post(
        exchange.url("auth/token/"),
        json={"username": "alice", "password": PASSWORD, "scopes": ["read", "trade", "withdraw"], "otp": otp},
        timeout=10,
    ).json()["token"]
    client = requests.Session()
    client.headers["Authorization"] = f"Token {token}"

    funded = wait_for(
        "alice's funding deposits",
        lambda: (b := balances(client, exchange)).get("USDT", 0) >= 100000 and b.get("BTC", 0) >= 2 and b,
        120,
    )
    wait_for(
        "the bot's asks on BTC-USDT",
        lambda: client.get(exchange.url("markets/BTC-USDT/depth/"), timeout=10).json()["asks"],
        60,
    )

    order = client.post(
        exchange.url("orders/"),
        timeout=10,
        json={"market": "BTC-USDT", "side": "buy", "type": "market", "quote_qty": "1000"},
    )
    if order.status_code != 201:
        raise Failure(f"marketable order refused: {order.status_code} {order.text}")
    fills = wait_for("alice's fill", lambda: client.get(exchange.url("trades/?market=BTC-USDT"), timeout=10).json(), 30)
    after_trade = balances(client, exchange)
    if not (after_trade["BTC"] > funded["BTC"] and after_trade["USDT"] < funded["USDT"]):
        raise Failure(f"balances did not move with the trade: {funded} -> {after_trade}")
    figures["fills"] = len(fills)

    sys.path.insert(0, str(ROOT))
    from apps.wallets.custody.simnet import new_address

    withdrawal = client.post(
        exchange.url("withdrawals/"), timeout=10, json={"asset": "USDT", "amount": "100", "address": new_address()}
    )
    if withdrawal.status_code != 201:
        raise Failure(f"withdrawal refused: {withdrawal.status_code} {withdrawal.text}")
    withdrawal_id = withdrawal.json()["id"]

    def completed():
        rows = client.get(exchange.url("withdrawals/"), timeout=10).json()
        return next((row for row in rows if row["id"] == withdrawal_id and row["status"] == "completed"), None)

    done = wait_for("the withdrawal to complete through custody", completed, 90)
    figures["withdrawal_txid"] = bool(done["txid"])

    services_env = dict(line.split("=", 1) for line in (exchange.data_dir / "services.env").read_text().split())
    reconcile = subprocess.run(
        [sys.executable, "manage.py", "reconcile", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**exchange.env, **services_env},
        timeout=120,
    )
    figures["reconcile_exit"] = reconcile.returncode
    if reconcile.returncode != 0:
        raise Failure(f"reconcile failed:\n{reconcile.stdout[-3000:]}{reconcile.stderr[-2000:]}")


def main() -> int:
    figures: dict = {"bench": "e2e"}
    with tempfile.TemporaryDirectory(prefix="exchange-e2e-") as folder:
        data_dir = Path(folder) / "data"
        log_path = Path(folder) / "make-run.log"
        exchange = Exchange(data_dir, free_port(), log_path)
        failure = None
        try:
            scenario(exchange, figures)
        except (Failure, requests.RequestException, KeyError, ValueError) as error:
            failure = f"{type(error).__name__}: {error}"
        finally:
            leftovers = exchange.stop()
            figures["left_running"] = leftovers
            if leftovers and failure is None:
                failure = f"processes left running: {leftovers}"
            if failure:
                figures["failure"] = failure
                print(log_path.read_text(errors="replace")[-6000:], file=sys.stderr)
        figures["seconds"] = round(300 - (DEADLINE - time.monotonic()), 1)
        print(json.dumps(figures), flush=True)
    return 1 if failure else 0


if __name__ == "__main__":
    sys.exit(main())
