"""Market data benchmark: reading candles at 10 million trades, the 24-hour ticker, and what keeping the
candles costs an order placement.

Run by ``make bench`` (or ``python bench/marketdata.py [--trades N] [--placements N]`` under
``python -m devtools.localservices exec --``). Prints one JSON line per case::

    {"bench": "marketdata", "case": "candles", "interval": "1m", "trades": 10000000, "candles": 1000,
     "selector_p50_ms": ..., "selector_p99_ms": ..., "api_p50_ms": ..., "reference_p50_ms": ..., ...}
    {"bench": "marketdata", "case": "derived candles", "interval": "30m", "source": "15m", "candles": 1000,
     "selector_p50_ms": ..., "source_selector_p50_ms": ..., ...}
    {"bench": "marketdata", "case": "candles_latest", "intervals": 15, "p50_ms": ..., "p99_ms": ...}
    {"bench": "marketdata", "case": "ticker", "ticker_p50_ms": ..., "tickers_p50_ms": ..., "reference_p50_ms": ...}
    {"bench": "marketdata", "case": "placement", "with_candles_p50_ms": ..., "without_candles_p50_ms": ...,
     "added_p50_ms": ..., ...}

History: a year of ``--trades`` trades (10 million by default, one every 3.15 s up to now, prices
wandering around 50,000 on the 0.01 tick, quantities on the 0.0001 step) is generated with
``generate_series`` and aggregated set-based straight into the candle table: the 1m candles from
the trade series (first and last price in trade order, exact NUMERIC sums), the wider intervals
rolled up from the 1m candles. The generated trades are not written to ``orders_trade`` (10 million
trades would need 10 million journal entries); reading candles never touches that table. The
trades of the last minutes, which the ticker's window edges read, are real: placed through
:func:`apps.orders.services.order_place`. A check compares the roll-ups with the 1m candles.

Cases:

- ``candles``: per interval, the latest 1,000 candles and 1,000 from the middle of the history,
  through the selector (:func:`apps.marketdata.selectors.candles`) and through the API view
  (``GET /api/v1/markets/BTC-USDT/candles/``, formatting included). Reference, same run: the same
  1,000 rows read by plain SQL on the same index (Django's cursor, no conversion work saved), and the
  selector's statement under EXPLAIN ANALYZE (``plan``, ``plan_execution_ms``: the database's share).
- ``ticker``: :func:`ticker_24h` and :func:`tickers_24h` (1,440 one-minute candles and the edge
  minutes' trades). Reference, same run: the order book's best level (``order_book_depth(limit=1)``).
- ``placement``: a placement that fills one resting order (the maker's ask is placed beforehand,
  untimed), with the candle upsert and, interleaved in blocks in the same run, with
  ``apps.orders.services.candles_record`` replaced by a function that does nothing.

It runs in its own database (``<name>_bench_marketdata``, created and dropped here).
"""

import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._scratch import bench_database_url, recreate_database  # noqa: E402 (ROOT is on sys.path now)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exchange.settings.local")

D = Decimal
SYMBOL = "BTC-USDT"
EPOCH = "TIMESTAMPTZ '1970-01-01 00:00:00+00'"
HISTORY = timedelta(days=365)

# The generated trade n (1..N): its time, price (0.01 tick, around 50,000) and quantity (0.0001 step).
_TRADE_SERIES = """
    SELECT n, %(t0)s::timestamptz + n * %(spacing)s::interval AS at,
           round((50000 + 5000 * sin(n / 200000.0))::numeric, 2) + ((n * 7919) %% 201 - 100) * 0.01 AS price,
           (1 + (n * 31) %% 200) * 0.0001 AS qty
    FROM generate_series(1::bigint, %(trades)s::bigint) AS n
"""
_FILL_1M = f"""
    INSERT INTO marketdata_candle (market_id, interval, open_time, open, high, low, close, volume, quote_volume, trades,
                                   taker_buy_volume, taker_buy_quote_volume)
    SELECT %(market)s, '1m', date_bin('1 minute', at, {EPOCH}) AS bucket,
           (array_agg(price ORDER BY n))[1], max(price), min(price), (array_agg(price ORDER BY n DESC))[1],
           sum(qty), sum(qty * price), count(*),
           COALESCE(sum(qty) FILTER (WHERE n %% 2 = 0), 0), COALESCE(sum(qty * price) FILTER (WHERE n %% 2 = 0), 0)
    FROM ({_TRADE_SERIES}) AS g
    GROUP BY bucket
"""
_ROLL_UP = f"""
    INSERT INTO marketdata_candle (market_id, interval, open_time, open, high, low, close, volume, quote_volume, trades,
                                   taker_buy_volume, taker_buy_quote_volume)
    SELECT c.market_id, i.name, date_bin(i.width, c.open_time, {EPOCH}) AS bucket,
           (array_agg(c.open ORDER BY c.open_time))[1], max(c.high), min(c.low),
           (array_agg(c.close ORDER BY c.open_time DESC))[1], sum(c.volume), sum(c.quote_volume), sum(c.trades),
           sum(c.taker_buy_volume), sum(c.taker_buy_quote_volume)
    FROM marketdata_candle c
    CROSS JOIN (VALUES ('5m', INTERVAL '5 minutes'), ('15m', INTERVAL '15 minutes'), ('1h', INTERVAL '1 hour'),
                       ('4h', INTERVAL '4 hours'), ('1d', INTERVAL '1 day')) AS i(name, width)
    WHERE c.market_id = %(market)s AND c.interval = '1m'
    GROUP BY c.market_id, i.name, bucket
"""
_CHECK = """
    SELECT interval, sum(volume), sum(quote_volume), sum(trades), sum(taker_buy_volume) FROM marketdata_candle
    WHERE market_id = %s GROUP BY interval
"""
_REFERENCE_CANDLES = """
    SELECT open_time, open, high, low, close, volume, quote_volume, trades, taker_buy_volume, taker_buy_quote_volume
    FROM marketdata_candle
    WHERE market_id = %s AND interval = %s ORDER BY open_time DESC LIMIT 1000
"""


def setup_django() -> None:
    import django
    from django.conf import settings

    django.setup()
    settings.DEBUG = False  # no query log


def ms(seconds: list[float]) -> tuple[float, float]:
    """``(p50, p99)`` in milliseconds."""
    ordered = sorted(seconds)
    return round(statistics.median(ordered) * 1000, 3), round(ordered[max(0, int(len(ordered) * 0.99) - 1)] * 1000, 3)


def timed(call, repeat: int) -> list[float]:
    call()  # warm: plans, caches
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def prepare() -> tuple:
    """Assets, the market, the default fee schedule and two funded users: ``(market, maker id, taker id)``."""
    from django.contrib.auth import get_user_model

    from apps.ledger.models import AccountKind, Asset
    from apps.ledger.services import credit, debit, system_account, user_account, user_accounts
    from apps.orders.models import FeeSchedule
    from apps.orders.services import market_create
    from bench._funding import capital_grant

    FeeSchedule.objects.update_or_create(  # the migrations made a default schedule: 0.1 % both ways
        is_default=True, defaults={"name": "default", "maker_rate": D("0.001"), "taker_rate": D("0.001")}
    )
    usdt = Asset.objects.create(code="USDT", name="Tether", decimals=6)
    btc = Asset.objects.create(code="BTC", name="Bitcoin", decimals=8)
    market = market_create(
        base=btc, quote=usdt, tick_size=D("0.01"), step_size=D("0.0001"), min_qty=D("0.0001"), max_qty=D("1000")
    )
    users = [get_user_model().objects.create(username=name).id for name in ("maker", "taker")]
    for user_id in users:
        for asset, amount in ((btc, D("1000000")), (usdt, D("100000000000"))):
            user_accounts(user_id, asset)
            capital_grant(  # owner capital, not a deposit
                legs=[
                    debit(system_account(AccountKind.EQUITY, asset), amount),
                    credit(user_account(user_id, asset), amount),
                ],
                memo="bench: owner capital",
            )
    return market, users[0], users[1]


def generate_history(market, trades: int) -> dict:
    """Candles of ``trades`` generated trades over the year up to now (set-based); returns the figures."""
    from django.db import connection
    from django.utils import timezone

    spacing = HISTORY / trades
    t0 = timezone.now() - HISTORY - timedelta(seconds=1)
    params = {"market": market.id, "t0": t0, "spacing": spacing, "trades": trades}
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(_FILL_1M, params)
        one_minute = cursor.rowcount
        cursor.execute(_ROLL_UP, params)
        cursor.execute("ANALYZE marketdata_candle")
        cursor.execute(_CHECK, [market.id])
        totals = {row[0]: row[1:] for row in cursor.fetchall()}
    return {
        "trades": trades,
        "candles_1m": one_minute,
        "generate_s": round(time.perf_counter() - started, 1),
        # Every interval holds every trade exactly once: the same volumes and count as the 1m candles.
        "rollup_ok": len(set(totals.values())) == 1 and totals["1m"][2] == trades,
    }


def bench_candles(market, history: dict) -> list[dict]:
    from django.db import connection
    from django.test import Client

    from apps.marketdata.models import INTERVAL_WIDTHS, Candle
    from apps.marketdata.selectors import candles

    client = Client()
    lines = []
    for interval in INTERVAL_WIDTHS:
        total = Candle.objects.filter(market_id=market.id, interval=interval).count()
        first = Candle.objects.filter(market_id=market.id, interval=interval).order_by("open_time").first()
        assert first is not None, "the history was seeded"
        middle = first.open_time + (HISTORY / 2 if total > 2000 else timedelta(0))

        def reference(interval=interval):
            with connection.cursor() as cursor:
                cursor.execute(_REFERENCE_CANDLES, [market.id, interval])
                cursor.fetchall()

        latest = timed(lambda interval=interval: candles(market=SYMBOL, interval=interval, limit=1000), 100)
        mid = timed(
            lambda interval=interval, middle=middle: candles(
                market=SYMBOL, interval=interval, start=middle, limit=1000
            ),
            100,
        )
        api = timed(
            lambda interval=interval: client.get(
                f"/api/v1/markets/{SYMBOL}/candles/", {"interval": interval, "limit": "1000"}
            ),
            50,
        )
        ref = timed(reference, 100)
        plan = explain(market, interval)
        returned = len(candles(market=SYMBOL, interval=interval, limit=1000))
        (s50, s99), (m50, m99), (a50, a99), (r50, r99) = ms(latest), ms(mid), ms(api), ms(ref)
        lines.append(
            {
                "bench": "marketdata",
                "case": "candles",
                "interval": interval,
                "trades": history["trades"],
                "candles_in_table": total,
                "candles": returned,
                "selector_p50_ms": s50,
                "selector_p99_ms": s99,
                "selector_from_middle_p50_ms": m50,
                "selector_from_middle_p99_ms": m99,
                "api_p50_ms": a50,
                "api_p99_ms": a99,
                "reference_sql_p50_ms": r50,
                "plan": plan["plan"],
                "plan_execution_ms": plan["execution_ms"],
                "reference_sql_p99_ms": r99,
                "selector_p50_under_50ms": s50 < 50,
                "selector_over_reference": round(s50 / r50, 2),
            }
        )
    return lines


def bench_derived_candles(market) -> list[dict]:
    """The intervals summed when read (:mod:`apps.marketdata.intervals`: 3m, 30m, 2h, 6h, 8h, 12h, 3d, 1w, 1M), each
    beside the stored interval it is read from, measured in the same run: the latest 1,000 candles by the selector;
    then ``candles_latest`` (every interval's newest candle, what the stream relay reads after each batch of trades)."""
    from apps.marketdata.intervals import KLINE_INTERVALS
    from apps.marketdata.selectors import candles, candles_latest

    lines = []
    for interval, span in KLINE_INTERVALS.items():
        if span.source == interval:
            continue
        derived = timed(lambda interval=interval: candles(market=SYMBOL, interval=interval, limit=1000), 50)
        source = timed(lambda span=span: candles(market=SYMBOL, interval=span.source, limit=1000), 50)
        (d50, d99), (s50, _) = ms(derived), ms(source)
        lines.append(
            {
                "bench": "marketdata",
                "case": "derived candles",
                "interval": interval,
                "source": span.source,
                "candles": len(candles(market=SYMBOL, interval=interval, limit=1000)),
                "selector_p50_ms": d50,
                "selector_p99_ms": d99,
                "source_selector_p50_ms": s50,
                "selector_p50_under_50ms": d50 < 50,
            }
        )
    (l50, l99) = ms(timed(lambda: candles_latest(market_id=market.id), 100))
    intervals = len(candles_latest(market_id=market.id))
    lines.append(
        {"bench": "marketdata", "case": "candles_latest", "intervals": intervals, "p50_ms": l50, "p99_ms": l99}
    )
    return lines


def explain(market, interval: str) -> dict:
    """EXPLAIN ANALYZE of the selector's statement for the latest 1,000 candles: the top scan and its time."""
    from django.db import connection

    from apps.marketdata.selectors import _CANDLES_TO_END

    params = {"market": market.symbol, "interval": interval, "start": None, "end": None, "limit": 1000}
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + _CANDLES_TO_END, params)
        (report,) = cursor.fetchone()[0]
    nodes = [report["Plan"]]
    while nodes[-1].get("Relation Name") != "marketdata_candle":  # depth first, to the candle table's scan
        node = nodes.pop()
        nodes += reversed(node.get("Plans", []))
    scan = nodes[-1]
    return {"plan": f"{scan['Node Type']} using {scan.get('Index Name')}", "execution_ms": report["Execution Time"]}


def place_pair(maker: int, taker: int, price: str) -> None:
    """The maker's ask (untimed by the caller) is placed by :func:`crossing`; this is the taker's buy that fills it."""
    from apps.orders.services import order_place

    order_place(user_id=taker, market=SYMBOL, side="buy", price=price, qty="0.0100", time_in_force="IOC")


def bench_placement(maker: int, taker: int, placements: int) -> dict:
    from apps.marketdata import receivers
    from apps.orders.events import trades_executed
    from apps.orders.services import order_place

    uid = "marketdata.trades_executed"  # the receiver's, as MarketdataConfig.ready connects it
    timings: dict[str, list[float]] = {"with": [], "without": []}
    block = 50
    for n in range(placements // block):
        mode = "with" if n % 2 == 0 else "without"
        if mode == "with":
            trades_executed.connect(receivers.trades_executed, dispatch_uid=uid)
        else:
            trades_executed.disconnect(dispatch_uid=uid)  # the candle upsert switched off (this benchmark only)
        for _ in range(block):
            price = "50000.00"
            order_place(user_id=maker, market=SYMBOL, side="sell", price=price, qty="0.0100")
            started = time.perf_counter()
            place_pair(maker, taker, price)
            timings[mode].append(time.perf_counter() - started)
    trades_executed.connect(receivers.trades_executed, dispatch_uid=uid)
    (w50, w99), (o50, o99) = ms(timings["with"]), ms(timings["without"])
    return {
        "bench": "marketdata",
        "case": "placement",
        "placements": placements,
        "fills_per_placement": 1,
        "with_candles_p50_ms": w50,
        "with_candles_p99_ms": w99,
        "without_candles_p50_ms": o50,
        "without_candles_p99_ms": o99,
        "added_p50_ms": round(w50 - o50, 3),
        "added_p50_percent": round((w50 - o50) / o50 * 100, 1),
    }


def bench_ticker(market) -> dict:
    from apps.marketdata.selectors import ticker_24h, tickers_24h
    from apps.orders.selectors import order_book_depth

    ticker = ticker_24h(market=SYMBOL)
    (t50, t99), (a50, a99), (r50, r99) = (
        ms(timed(lambda: ticker_24h(market=SYMBOL), 200)),
        ms(timed(tickers_24h, 200)),
        ms(timed(lambda: order_book_depth(market=SYMBOL, limit=1), 200)),
    )
    return {
        "bench": "marketdata",
        "case": "ticker",
        "window_trades": ticker.trades,
        "ticker_p50_ms": t50,
        "ticker_p99_ms": t99,
        "tickers_p50_ms": a50,
        "tickers_p99_ms": a99,
        "reference_depth_p50_ms": r50,
        "reference_depth_p99_ms": r99,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trades", type=int, default=10_000_000, help="generated trades of history")
    parser.add_argument("--placements", type=int, default=2000, help="timed placements (half with candles)")
    args = parser.parse_args()

    admin_url, bench_url = bench_database_url("_bench_marketdata")
    recreate_database(admin_url, bench_url)
    os.environ["DATABASE_URL"] = bench_url
    setup_django()
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)
    try:
        market, maker, taker = prepare()
        history = generate_history(market, args.trades)
        print(json.dumps({"bench": "marketdata", "case": "history", **history}), flush=True)
        placement = bench_placement(maker, taker, args.placements)  # also the real trades of the last minutes
        for line in bench_candles(market, history) + bench_derived_candles(market):
            print(json.dumps(line), flush=True)
        print(json.dumps(bench_ticker(market)), flush=True)
        print(json.dumps(placement), flush=True)
    finally:
        connections.close_all()
        recreate_database(admin_url, bench_url, drop_only=True)
    return 0 if history["rollup_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
