"""The relay: publishes committed outbox rows (:class:`~apps.streams.models.StreamEvent`) in order.

One relay runs at a time (a PostgreSQL advisory lock; a second one waits as a standby).
Each round, in one transaction, it deletes up to ``STREAMS_RELAY_BATCH`` rows in id order
(``DELETE ... RETURNING``), publishes them to the channel layer (Redis pub/sub, one
connection, so every subscriber receives them in publish order) and commits. A crash
before the commit publishes the rows again: consumers drop what they have seen by update
id and part (a user's execution reports carry their market's update id too). When there is nothing to do it waits for
a writer's ring (sent at its commit, :mod:`apps.core.doorbell`) or ``STREAMS_RELAY_IDLE_SECONDS``.

Order: a market's rows are written under its row lock, so they become visible in update id
order and a round never sees update ``n + 1`` without ``n``; consecutive rows of a market
within a round are merged into one ``depthUpdate`` (``U``..``u``); a run with trades also publishes the
candles they went into (``kline_<interval>``, read from :mod:`apps.marketdata`, whose candles are
kept in the fill's transaction), and markets whose book changed get a ``24hrTicker`` at most once
a second (:func:`apps.marketdata.selectors.ticker_24h`). Every market's best 5, 10 and 20 levels go out every
second on its partial depth streams (``depth<levels>``, and ``depth<levels>@100ms`` every 100 ms while its book
changes), read from the book (:func:`apps.orders.selectors.order_book_depth`). Every ``KLINE_SECONDS`` each market that has
traded gets its current candle of every interval, trades or not, preceded by the final state of a candle
that closed since (:func:`apps.marketdata.selectors.candles_live`). Deposit and withdrawal
rows are published as their objects are when the relay reads them, with the user's
balance of the asset; after a book change the balances of the users it touched.
"""

import asyncio
import json
import logging
import time
from collections import defaultdict
from datetime import datetime

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.core.doorbell import Doorbell
from apps.ledger.amounts import format_amount
from apps.ledger.models import Asset
from apps.ledger.selectors import balances_for_users
from apps.marketdata.selectors import candles_latest, candles_live, ticker_24h
from apps.orders.models import Market
from apps.orders.selectors import order_book_depth
from apps.wallets.apis import WithdrawalOut
from apps.wallets.models import Deposit, Withdrawal

from . import events
from .groups import PARTIAL_DEPTH_LEVELS, PARTIAL_DEPTH_SPEEDS, all_markets_group, market_group, user_group
from .models import RELAY_CHANNEL, StreamEventKind

log = logging.getLogger(__name__)

TICKER_SECONDS = 1.0
KLINE_SECONDS = 2.0
"""How often every market's current candles are pushed (Binance's kline streams: "Update Speed: ... 2000ms for
the other intervals", web-socket-streams.md; it has no 1s interval here)."""
RELAY_LOCK_KEY = 0x5354524D  # "STRM": pg_advisory_lock key held by the active relay

_TAKE = """
    DELETE FROM streams_streamevent WHERE id IN (SELECT id FROM streams_streamevent ORDER BY id LIMIT %s)
    RETURNING id, kind, market_id, update_id, user_id, object_id, payload
"""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Relay:
    """Drains the outbox into the channel layer; :meth:`run` loops until :meth:`stop`."""

    def __init__(self, *, batch: int | None = None, idle: float | None = None):
        self.batch = batch or settings.STREAMS_RELAY_BATCH
        self.idle = settings.STREAMS_RELAY_IDLE_SECONDS if idle is None else idle
        self.loop = asyncio.new_event_loop()
        self.layer = get_channel_layer()
        self.markets: dict[int, events.MarketInfo] = {}
        self.tickers_due: set[int] = set()
        self.tickers_sent = 0.0
        self.klines_sent = 0.0
        self.kline_buckets: dict[tuple[int, str], datetime] = {}  # (market, interval) -> the bucket last pushed
        self.depth_changed: set[int] = set()  # markets whose book changed since the last partial depth push
        self.depths_sent = dict.fromkeys(PARTIAL_DEPTH_SPEEDS, 0.0)  # speed -> when its streams were last pushed
        self.stopped = False
        self.doorbell = Doorbell([])

    def stop(self) -> None:
        self.stopped = True

    def run(self) -> None:
        """Publish until stopped; after any failure (Redis or the database away) start again on a new connection.

        Each start takes the relay lock anew (a lost connection loses it, and a standby may have
        taken over meanwhile: this relay then waits). A failed round deleted nothing.
        """
        while not self.stopped:
            try:
                self.activate()
                while not self.stopped:
                    published = self.round()
                    self.tickers()
                    self.klines()
                    self.partial_depths()
                    if published < self.batch:
                        self.wait()
            except Exception:
                log.exception("stream relay failed; starting again")
                connection.close()
                time.sleep(0.5)
        self.doorbell.close()

    def activate(self) -> None:
        """Take the relay lock (waiting while another relay holds it) on this connection, and listen for rings."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [RELAY_LOCK_KEY])
        self.doorbell.add(RELAY_CHANNEL)
        log.info("stream relay active")

    def wait(self) -> None:
        """Until a writer rings, ``idle`` seconds pass or partial depth streams are due (:meth:`partial_depths`); a
        ring that came since the last wait returns at once."""
        next_push = min(self.depths_sent[speed] + PARTIAL_DEPTH_SPEEDS[speed] for speed in self.depth_speeds_live())
        self.doorbell.wait(max(0.0, min(self.idle, next_push - time.monotonic())))

    def depth_speeds_live(self) -> list[str]:
        """The partial depth speeds with a push to come: every second's always, the 100 ms one while a book changed."""
        return [speed for speed in PARTIAL_DEPTH_SPEEDS if speed == "" or self.depth_changed]

    def round(self) -> int:
        """Publish one batch of outbox rows in one transaction; returns how many rows it took."""
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(_TAKE, [self.batch])
                rows = sorted(cursor.fetchall())
            if rows:
                self.loop.run_until_complete(self.publish(self.messages(rows)))
        return len(rows)

    def market(self, market_id: int) -> events.MarketInfo:
        info = self.markets.get(market_id)
        if info is None:
            market = Market.objects.select_related("base", "quote").get(id=market_id)
            info = self.markets[market_id] = events.MarketInfo.of(market)
        return info

    def messages(self, rows: list[tuple]) -> list[tuple[str, dict]]:
        """``(group, message)`` pairs for the rows (sorted by id), in publish order."""
        out: list[tuple[str, dict]] = []
        run: list[events.BookChange] = []
        run_market: int | None = None
        touched: dict[int, set[int]] = defaultdict(set)  # user -> asset ids whose balance to publish
        wallet_objects: set[tuple[str, int]] = set()
        for _, kind, market_id, update_id, user_id, object_id, payload in rows:
            if kind == StreamEventKind.BOOK:
                payload = json.loads(payload)  # Django's cursor leaves jsonb as text; amounts in it are strings
                if run and market_id != run_market:
                    assert run_market is not None  # set with the run's first event
                    out += self.book_messages(self.market(run_market), run, touched)
                    run = []
                run_market = market_id
                run.append(events.BookChange(update_id, payload))
            elif kind == StreamEventKind.NOTICE:  # each notice once, as recorded
                out.append(
                    (user_group(user_id), _message({"e": "accountNotice", "E": now_ms(), **json.loads(payload)}))
                )
            elif (kind, object_id) not in wallet_objects:  # published as it is now: once per round is enough
                wallet_objects.add((kind, object_id))
                out += self.wallet_message(kind, user_id, object_id, touched)
        if run:
            assert run_market is not None  # set with the run's first event
            out += self.book_messages(self.market(run_market), run, touched)
        out += self.balance_messages(touched)
        return out

    def book_messages(self, market: events.MarketInfo, run: list[events.BookChange], touched) -> list:
        stamp = now_ms()
        symbol = market.stream_symbol
        first, last = run[0].update_id, run[-1].update_id
        out = [(market_group(symbol, "depth"), _message(events.depth_update(market, run, stamp), first, last))]
        for change in run:
            for part, trade in enumerate(events.trades(market, change, stamp)):  # one change, several fills
                out.append((market_group(symbol, "trade"), _message(trade, change.update_id, change.update_id, part)))
            for part, aggregate in enumerate(events.agg_trades(market, change, stamp)):
                message = _message(aggregate, change.update_id, change.update_id, part)
                out.append((market_group(symbol, "aggTrade"), message))
            # Numbered within the change on the market's sequence, so a round published again is dropped.
            for part, (user_id, report) in enumerate(events.execution_reports(market, change, stamp)):
                position = {"first": change.update_id, "last": change.update_id, "part": part, "sequence": market.id}
                out.append((user_group(user_id), _message(report, **position)))
                touched[user_id] |= {market.base_id, market.quote_id}
        ticker = events.book_ticker(market, run[-1])
        out.append((market_group(symbol, "bookTicker"), _message(ticker, last, last)))
        if any(change.payload["trades"] for change in run):
            for candle in candles_latest(market_id=market.id):  # the candles the trades went into (their transaction's)
                kline = events.kline(market, candle, stamp)
                out.append((market_group(symbol, f"kline_{candle.interval}"), _message(kline, last, last)))
        self.tickers_due.add(market.id)
        self.depth_changed.add(market.id)
        return out

    def tickers(self) -> None:
        """:meth:`publish_tickers`; a failure is logged and left to the next change (no outbox row is at stake)."""
        try:
            self.publish_tickers()
        except Exception:
            log.exception("stream relay tickers failed")

    def publish_tickers(self) -> None:
        """``24hrTicker`` and ``24hrMiniTicker`` of each market whose book changed, at most once per ``TICKER_SECONDS``
        (Binance: 1 s), on the market's ``ticker`` and ``miniTicker`` streams and, as one array of them all, on
        ``!ticker@arr`` and ``!miniTicker@arr``."""
        now = time.monotonic()
        if not self.tickers_due or now - self.tickers_sent < TICKER_SECONDS:
            return
        self.tickers_sent = now
        due, self.tickers_due = self.tickers_due, set()
        stamp = now_ms()
        messages = []
        tickers, minis = [], []
        for market_id in sorted(due):
            market = self.market(market_id)
            ticker = events.ticker_24h(market, ticker_24h(market=market.symbol), stamp)
            mini = events.mini_ticker(ticker)
            messages.append((market_group(market.stream_symbol, "ticker"), _message(ticker)))
            messages.append((market_group(market.stream_symbol, "miniTicker"), _message(mini)))
            tickers.append(ticker)
            minis.append(mini)
        messages.append((all_markets_group("ticker"), _message(tickers)))
        messages.append((all_markets_group("miniTicker"), _message(minis)))
        self.loop.run_until_complete(self.publish(messages))

    def klines(self) -> None:
        """:meth:`kline_messages` published every ``KLINE_SECONDS``; a failure is logged and left to the next push
        (no outbox row is at stake)."""
        now = time.monotonic()
        if now - self.klines_sent < KLINE_SECONDS:
            return
        self.klines_sent = now
        try:
            self.loop.run_until_complete(self.publish(self.kline_messages(timezone.now())))
        except Exception:
            log.exception("stream relay klines failed")

    def kline_messages(self, now: datetime) -> list[tuple[str, dict]]:
        """The ``kline_<interval>`` pushes due at ``now`` (:func:`~apps.marketdata.selectors.candles_live`) for every
        market that has traded, and the bucket each push ended with remembered for the next."""
        stamp = int(now.timestamp() * 1000)
        out = []
        for market_id in Market.objects.order_by("id").values_list("id", flat=True):
            market = self.market(market_id)
            for latest in candles_latest(market_id=market_id):
                key = (market_id, latest.interval)
                due = candles_live(latest, self.kline_buckets.get(key), now)
                if due:
                    self.kline_buckets[key] = due[-1].open_time
                group = market_group(market.stream_symbol, f"kline_{latest.interval}")
                out += [(group, _message(events.kline(market, candle, stamp))) for candle in due]
        return out

    def partial_depths(self) -> None:
        """:meth:`partial_depth_messages` published when due; a failure is logged and left to the next push (no outbox
        row is at stake)."""
        now = time.monotonic()
        due = [
            speed for speed in self.depth_speeds_live() if now - self.depths_sent[speed] >= PARTIAL_DEPTH_SPEEDS[speed]
        ]
        if not due:
            return
        every_market = "" in due  # the one-second push: every market, on every speed's streams
        market_ids = None if every_market else sorted(self.depth_changed)
        speeds = list(PARTIAL_DEPTH_SPEEDS) if every_market else due
        self.depths_sent.update(dict.fromkeys(speeds, now))
        self.depth_changed = set()
        try:
            self.loop.run_until_complete(self.publish(self.partial_depth_messages(market_ids, speeds)))
        except Exception:
            log.exception("stream relay partial depths failed")

    def partial_depth_messages(self, market_ids: list[int] | None, speeds: list[str]) -> list[tuple[str, dict]]:
        """Binance's partial book depth events (:func:`events.partial_depth`) of ``market_ids`` (``None``: every
        market) on their ``depth<levels><speed>`` streams, for each of ``speeds`` (``""``, ``"@100ms"``)."""
        if market_ids is None:
            market_ids = list(Market.objects.order_by("id").values_list("id", flat=True))
        out = []
        for market_id in market_ids:
            market = self.market(market_id)
            book = order_book_depth(market=market.symbol, limit=max(PARTIAL_DEPTH_LEVELS))
            for levels in PARTIAL_DEPTH_LEVELS:
                message = _message(events.partial_depth(market, book, levels))
                out += [(market_group(market.stream_symbol, f"depth{levels}{speed}"), message) for speed in speeds]
        return out

    def wallet_message(self, kind: str, user_id: int, object_id: int, touched) -> list:
        if kind == StreamEventKind.DEPOSIT:
            deposit = Deposit.objects.select_related("asset").filter(pk=object_id).first()
            if deposit is None:
                return []
            touched[user_id].add(deposit.asset_id)
            data = {
                "e": "depositUpdate",
                "E": now_ms(),
                "d": {
                    "id": deposit.id,
                    "asset": deposit.asset.code,
                    "amount": format_amount(deposit.amount, deposit.asset.decimals),
                    "txid": deposit.txid,
                    "vout": deposit.vout,
                    "status": deposit.status,
                    "confirmations": deposit.confirmations,
                },
            }
        else:
            withdrawal = Withdrawal.objects.select_related("asset").filter(pk=object_id).first()
            if withdrawal is None:
                return []
            touched[user_id].add(withdrawal.asset_id)
            data = {"e": "withdrawalUpdate", "E": now_ms(), "w": WithdrawalOut(withdrawal).data}
        return [(user_group(user_id), _message(data))]

    def balance_messages(self, touched: dict[int, set[int]]) -> list:
        """One ``outboundAccountPosition`` per user: the balances of the assets the round changed for them."""
        if not touched:
            return []
        balances = balances_for_users(user_ids=set(touched), asset_ids=set().union(*touched.values()))
        codes = dict(Asset.objects.filter(id__in=set().union(*touched.values())).values_list("id", "code"))
        stamp = now_ms()
        out = []
        for user_id, asset_ids in touched.items():
            wanted = {codes[asset_id] for asset_id in asset_ids}
            rows = [(b.asset, b.decimals, b.available, b.held) for b in balances[user_id] if b.asset in wanted]
            out.append((user_group(user_id), _message(events.account_position(rows, stamp))))
        return out

    async def publish(self, messages: list[tuple[str, dict]]) -> None:
        for group, message in messages:
            await self.layer.group_send(group, {**message, "group": group})


def _message(
    data: dict | list, first: int | None = None, last: int | None = None, part: int = 0, sequence: int | None = None
) -> dict:
    """A channel-layer message: the event serialised once (consumers forward the text), with its update ids and,
    for the several events one update makes on a stream (its trades, its execution reports), its ``part``
    (0, 1, ...): consumers drop a repeated ``(last, part)``, never the next part of the same update.
    ``sequence`` names whose update ids they are when a group carries several (a user's group: the market's
    id); ``None`` on a market's own groups."""
    return {
        "type": "stream.event",
        "data": json.dumps(data, separators=(",", ":")),
        "first": first,
        "last": last,
        "part": part,
        "sequence": sequence,
    }
