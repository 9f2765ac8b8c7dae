"""What every part of the soak shares: its sizes, time limits, assets and markets, the traders' mix, and small
helpers (JSON figures, ports, amounts)."""

from __future__ import annotations

import json
import socket
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]  # the repository: the services and the clients run from it

D = Decimal
WEB_WORKERS, WEB_THREADS = 2, 4
HTTP_TIMEOUT = 15  # seconds of one HTTP request
RETRY_WINDOW = 45  # seconds a client keeps retrying one operation without a definite answer
START_TIMEOUT = 120  # seconds for the services to become healthy
FAULT_KINDS = (
    "worker_killed",
    "worker_process_killed",
    "db_connections_terminated",
    "web_killed",
    "web_restarted",
    "relay_killed",
    "engine_killed",
)
SIMULATOR_CONFIRMATIONS = 2  # deposits are reported with 0, 1 and 2 confirmations; 2 are required

# (code, decimals, withdrawal fee, min withdrawal, auto-approved up to, daily limit)
ASSETS = [
    ("BTC", 8, D("0.0001"), D("0.001"), D("0.05"), D("100000")),
    ("ETH", 18, D("0.002"), D("0.01"), D("1"), D("1000000")),
    ("USDT", 6, D("1"), D("10"), D("1000"), D("1000000000")),
]
NETWORK_FEES = {"BTC": "0.00001", "ETH": "0.0001", "USDT": "0.5"}
# (base, quote, mid price, tick size, step size, min qty, max qty, min notional)
MARKETS = [
    ("BTC", "USDT", D("50000"), D("0.01"), D("0.0001"), D("0.0001"), D("100"), D("5")),
    ("ETH", "USDT", D("3000"), D("0.01"), D("0.0001"), D("0.001"), D("1000"), D("5")),
]
FUNDING = {"BTC": D("20"), "ETH": D("300"), "USDT": D("2000000")}
DEPOSIT_RANGE = {"BTC": (D("0.01"), D("0.5")), "ETH": (D("0.1"), D("5")), "USDT": (D("100"), D("20000"))}
WITHDRAWAL_ASSETS = ("BTC", "USDT")
# Active entries of each trader's address book per withdrawal asset: each request uses a fresh one (the
# checks match withdrawals to requests by address); a trader who used them all reads instead.
WITHDRAWAL_ADDRESSES = 1500
REPLAY_KINDS = ("replay", "resigned")
FORGED_KINDS = ("bad_signature", "stale_timestamp", "tampered_body")
TRADER_OPERATIONS = {  # weights of the traders' mix
    "order_limit": 40,
    "order_market": 10,
    "order_cancel": 18,
    "deposit": 6,
    "withdrawal": 8,
    "withdrawal_cancel": 3,
    "read": 8,
}


def emit(figure: str, **values) -> None:
    """Print one JSON line of figures."""
    print(json.dumps({"bench": "soak", "figure": figure, **values}, default=str), flush=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def with_database(url: str, name: str) -> str:
    """``url`` with its database name replaced by ``name``."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def amount_text(value: Decimal) -> str:
    """A plain decimal string (never an exponent)."""
    return f"{value.normalize():f}" if value else "0"
