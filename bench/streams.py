"""Streams benchmark: fan-out to 500 WebSocket clients and the cost publishing adds to a placement.

Run by ``make bench`` (or ``python bench/streams.py [--clients N] [--trades N] [--orders N]`` under
``python -m devtools.localservices exec --``), in a database of its own (``<name>_streams_bench``,
created and dropped here). Prints JSON lines::

    {"bench": "streams", "case": "fan-out", "clients": 500, "web_processes": 2, "trades": ...,
     "events_delivered": ..., "events_per_s": ..., "p50_ms": ..., "p99_ms": ..., "max_ms": ...}
    {"bench": "streams", "case": "placement cost", "orders": ..., "publish_on_p50_ms": ...,
     "publish_off_p50_ms": ..., "added_p50_ms": ..., "publish_on_mean_ms": ..., "publish_off_mean_ms": ...}

Fan-out: two uvicorn processes (``exchange.asgi``) and the relay run as they do in production;
``--clients`` WebSocket clients (half on each process, all in this process's event loop)
subscribe to ``btcusdt@trade``. This process places crossing orders through
:func:`apps.orders.services.order_place`; each trade's latency is the time from the placement's
commit (when ``order_place`` returned) to its arrival at a client, over every client; events per
second is every delivered event over the time from the first commit to the last arrival.

Placement cost: the same stream of placements (a resting order and an order that takes it) in
alternating blocks with ``STREAMS_PUBLISH`` on and off, in one process and one run; the figures
are per placement (wall time of ``order_place``). The relay is not running meanwhile.
"""

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._scratch import bench_database_url, recreate_database  # noqa: E402 (ROOT is on sys.path now)
from devtools.procfile import procfile_arguments  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exchange.settings.local")

D = Decimal
BLOCK = 100  # placements per alternating block of the placement-cost case


def prepare() -> tuple[int, int]:
    """Assets, BTC-USDT, the default fee schedule and two users funded from equity; their ids."""
    from django.contrib.auth import get_user_model

    from apps.ledger.models import AccountKind, Asset
    from apps.ledger.services import credit, debit, system_account, user_account
    from apps.orders.models import FeeSchedule
    from apps.orders.services import market_create
    from bench._funding import capital_grant

    FeeSchedule.objects.update_or_create(
        is_default=True, defaults={"name": "default", "maker_rate": D("0.001"), "taker_rate": D("0.001")}
    )
    usdt = Asset.objects.create(code="USDT", name="Tether", decimals=6)
    btc = Asset.objects.create(code="BTC", name="Bitcoin", decimals=8)
    market_create(
        base=btc,
        quote=usdt,
        tick_size=D("0.01"),
        step_size=D("0.0001"),
        min_qty=D("0.0001"),
        max_qty=D("10000"),
        min_notional=D("1"),
    )
    users = [get_user_model().objects.create(username=name) for name in ("maker", "taker")]
    for user in users:
        for asset in (btc, usdt):
            capital_grant(
                legs=[
                    debit(system_account(AccountKind.EQUITY, asset), D("100000000")),
                    credit(user_account(user.id, asset), D("100000000")),
                ],
                memo="bench: owner capital",
            )
    return users[0].id, users[1].id


def trade_once(maker: int, taker: int) -> tuple[float, int]:
    """A resting sell and a buy that takes it; returns the commit time of the trade and its number (the stream's
    ``t``, Binance's integer trade id: ``Trade.number``)."""
    from apps.orders.models import TRADE_NUMBER_BASE
    from apps.orders.services import order_place

    order_place(user_id=maker, market="BTC-USDT", side="sell", price="50000", qty="0.001")
    taken = order_place(user_id=taker, market="BTC-USDT", side="buy", price="50000", qty="0.001")
    return time.time(), taken.id * TRADE_NUMBER_BASE + 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(command: list[str], env: dict, ready_port: int | None = None) -> subprocess.Popen:
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if ready_port is not None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", ready_port)) == 0:
                    return process
            time.sleep(0.1)
        raise RuntimeError(f"{command} did not listen on {ready_port}")
    return process


async def fan_out(ports: list[int], clients: int, trades: int, maker: int, taker: int) -> dict:
    """Connect the clients, make ``trades`` trades at a steady pace, collect every arrival."""
    import websockets
    from asgiref.sync import sync_to_async

    arrivals: dict[int, list[float]] = {}
    connections = []
    for index in range(clients):
        port = ports[index % len(ports)]
        connections.append(await websockets.connect(f"ws://127.0.0.1:{port}/ws/btcusdt@trade", max_queue=None))

    async def read(connection) -> None:
        async for text in connection:
            arrivals.setdefault(json.loads(text)["t"], []).append(time.time())

    readers = [asyncio.create_task(read(connection)) for connection in connections]
    await asyncio.sleep(1)  # every subscription in place
    commits: dict[int, float] = {}
    place = sync_to_async(trade_once, thread_sensitive=True)
    for _ in range(trades):
        committed, trade_id = await place(maker, taker)
        commits[trade_id] = committed
        await asyncio.sleep(0.01)
    deadline = time.time() + 30
    while time.time() < deadline and sum(len(arrivals.get(t, [])) for t in commits) < trades * clients:
        await asyncio.sleep(0.1)
    for connection in connections:
        await connection.close()
    for reader in readers:
        reader.cancel()
    latencies = sorted((arrived - commits[t]) * 1000 for t in commits for arrived in arrivals.get(t, []))
    first, last = min(commits.values()), max(max(times) for times in arrivals.values())
    return {
        "trades": trades,
        "events_expected": trades * clients,
        "events_delivered": len(latencies),
        "events_per_s": round(len(latencies) / (last - first), 1),
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
        "max_ms": round(latencies[-1], 2),
    }


def placement_cost(orders: int, maker: int, taker: int) -> dict:
    """Per-placement wall time with publishing on and off, in alternating blocks of ``BLOCK`` trades."""
    from django.conf import settings

    timings: dict[bool, list[float]] = {True: [], False: []}
    for block in range(max(2, orders // BLOCK)):
        publish = block % 2 == 0
        settings.STREAMS_PUBLISH = publish
        for _ in range(BLOCK // 2):
            started = time.perf_counter()
            trade_once(maker, taker)
            timings[publish].append((time.perf_counter() - started) * 1000 / 2)
    settings.STREAMS_PUBLISH = True
    on, off = statistics.median(timings[True]), statistics.median(timings[False])
    return {
        "orders": 2 * sum(len(values) for values in timings.values()),
        "publish_on_p50_ms": round(on, 3),
        "publish_off_p50_ms": round(off, 3),
        "added_p50_ms": round(on - off, 3),
        "publish_on_mean_ms": round(statistics.fmean(timings[True]), 3),
        "publish_off_mean_ms": round(statistics.fmean(timings[False]), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--trades", type=int, default=100, help="trades fanned out to every client")
    parser.add_argument("--orders", type=int, default=2000, help="placements timed in the cost case")
    args = parser.parse_args()

    admin_url, bench_url = bench_database_url("_streams_bench")
    recreate_database(admin_url, bench_url)
    os.environ["DATABASE_URL"] = bench_url
    prefix = f"bench-streams-{uuid.uuid4().hex[:8]}"
    os.environ["STREAMS_CHANNEL_PREFIX"] = prefix
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    settings.DEBUG = False
    call_command("migrate", verbosity=0)
    maker, taker = prepare()
    env = {**os.environ, "DATABASE_URL": bench_url, "STREAMS_CHANNEL_PREFIX": prefix, "LOG_LEVEL": "WARNING"}
    processes = []
    try:
        ports = [free_port(), free_port()]
        for port in ports:
            command = [sys.executable, "-m", "uvicorn", *procfile_arguments("streams"), "--port", str(port)]
            processes.append(start([*command, "--log-level", "warning", "--ws-max-queue", "100000"], env, port))
        processes.append(start([sys.executable, "manage.py", "run_stream_relay"], env))
        figures = asyncio.run(fan_out(ports, args.clients, args.trades, maker, taker))
        print(
            json.dumps(
                {"bench": "streams", "case": "fan-out", "clients": args.clients, "web_processes": len(ports), **figures}
            ),
            flush=True,
        )
        processes[-1].terminate()
        processes[-1].wait(timeout=30)
        print(
            json.dumps({"bench": "streams", "case": "placement cost", **placement_cost(args.orders, maker, taker)}),
            flush=True,
        )
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
        connections.close_all()
        recreate_database(admin_url, bench_url, drop_only=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
