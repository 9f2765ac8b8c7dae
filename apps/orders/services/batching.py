"""The sequencer's planned batch: a market's commands decided in memory and written with set-based statements.

:func:`batch_write` runs inside the sequencer's transaction (its caller owns it; the book it
changes is the sequencer's :class:`MarketBook`). Round trips, for any number of commands:

1. one pipeline: the market row lock (``FOR NO KEY UPDATE``, which also draws every new
   order's id), the frozen accounts, the stored orders the batch's ``client_order_id``\\ s and
   cancels name, the fee rates in force (default schedule and the tiers of every user the
   batch may meet) and the placing users' available balances (read without a lock); a read
   with nothing to look up (no placement, no ``client_order_id``, no cancel) is not sent;
2. only if the market's sequence moved since this sequencer's last commit (another writer:
   an inline cancel, a halt, the per-command fallback): the book, read again under the lock;
3. the planner (:class:`~apps.orders.engine.batch.BatchPlanner`: no database);
4. the accounts of every user the plan touches and the fee shards of its trades, locked once in
   id order (:meth:`apps.ledger.trading.TradingAccounts.lock`), with their balances: when a
   placing user's balance is not what step 1 read (a deposit or another market's trade in
   between), the book is read again and the batch planned again with the locked balances (and
   handed to the per-command path if that plan needs an account not locked);
5. every hold, fill and release (one ``entry_ids_posting``, while the rest is built), then one pipeline: the new orders
   (one INSERT), the trades and the end state of the resting orders the batch changed (one
   statement), the candles, the sequence bump, one stream event per change (one statement)
   and ``MARK_DONE`` (the callers' answers are published at the commit).

With the pending read and the commit, six round trips per batch however many commands it holds.

Every change (placement, replay, cancel) is its own stream event with its own update id,
as inline mode records them: the relay publishes one trade and one execution report per
fill, and a batch's events carry each order's state right after that change (known here,
not in the tables, which hold only the batch's end state).

What inline mode refuses, this refuses with the same error (class, message, fields); a
refusal writes nothing and bumps nothing. Anything unexpected (a database check, a
deadlock, :class:`~apps.orders.engine.batch.Unplannable`) raises: the sequencer rolls the
transaction back, drops the book and applies the batch per command
(:func:`apps.orders.services.sequencer.batch_apply`).
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, localcontext
from typing import Any, cast

from django.utils import timezone

from apps.accounts.errors import TradingFrozen
from apps.core.errors import DomainError
from apps.ledger.db import PreparedCursor
from apps.ledger.services import EntryRequest, entry_ids_posting
from apps.ledger.trading import (
    AVAILABLE_BALANCES_SQL,
    FillTerms,
    TradingAccounts,
    market_fee_shard_key,
    order_hold_entry,
    order_release_entry,
    trade_fill_entry,
)

from ..engine.batch import (
    BatchPlan,
    BatchPlanner,
    BookChange,
    Cancel,
    CancelAll,
    CancelByClientId,
    Existing,
    Hold,
    OrderState,
    Place,
    PlacedOrder,
    Release,
    TradeRow,
    Unplannable,
)
from ..engine.book import OrderBook
from ..engine.matching import WIDE, MatchPlan
from ..events import batch_written
from ..models import OPEN_STATUSES, TRADE_NUMBER_BASE, CommandKind, Order
from ..store import commands as queue
from ..store import engine as sql
from ..store import orders as order_rows
from ..store.commands import QueuedCommand
from ..store.markets import LockedMarket
from . import answers
from .cancel import order_cancel_audit
from .commands import domain_outcome
from .parsing import Request, limits_check, notional_check, request_parse

_PLACE_INPUTS = (
    "user_id",
    "side",
    "type",
    "price",
    "qty",
    "quote_qty",
    "time_in_force",
    "post_only",
    "stp",
    "client_order_id",
)


@dataclass
class MarketBook:
    """A sequencer's memory of one market: the book, what never changes of its orders, and the market's
    sequence as this sequencer's last commit left it (``None``: read the book before the next batch)."""

    market_id: int
    base_id: int
    quote_id: int
    book: OrderBook = field(default_factory=OrderBook)
    statics: dict[int, sql.OrderStatic] = field(default_factory=dict)
    sequence: int | None = None

    def reload(self, cursor) -> None:
        """Read the market's resting orders again (call it under the market lock)."""
        rows = sql.open_orders(cursor, self.market_id)
        self.book = OrderBook(maker for maker, _ in rows)
        self.statics = {maker.id: static for maker, static in rows}


class _Filters:
    """The market's quantity limits and minimum notional as inline placement checks them."""

    def __init__(self, market: LockedMarket):
        self.market = market

    def limits(self, request: Request) -> None:
        limits_check(self.market, request)

    def notional(self, request: Request, plan: MatchPlan) -> None:
        notional_check(self.market, request, plan)


def _parsed(
    commands: Sequence[QueuedCommand], market: LockedMarket, order_ids: list[int], frozen: set[int]
) -> list[Place | Cancel | CancelByClientId | CancelAll | DomainError]:
    """Each command as the planner takes it: refused already (frozen account, malformed request) or parsed."""
    ids = iter(order_ids)
    result: list[Place | Cancel | CancelByClientId | CancelAll | DomainError] = []
    for command in commands:
        payload = command.payload
        by_operator, cancel_id = bool(payload.get("by_operator")), payload.get("cancel_client_order_id", "")
        if command.kind == CommandKind.CANCEL and "client_order_id" in payload:
            result.append(
                CancelByClientId(
                    payload["user_id"],
                    payload["client_order_id"],
                    by_operator,
                    cancel_id,
                    payload.get("only_status", ""),
                )
            )
            continue
        if command.kind == CommandKind.CANCEL:
            only_status = payload.get("only_status", "")
            result.append(Cancel(payload["order_id"], payload.get("user_id"), by_operator, cancel_id, only_status))
            continue
        if command.kind == CommandKind.CANCEL_ALL:
            result.append(CancelAll(payload["user_id"], by_operator))
            continue
        order_id = next(ids)
        if payload["user_id"] in frozen:
            result.append(TradingFrozen("Trading is frozen on this account; open orders can still be cancelled."))
            continue
        try:
            inputs: dict[str, Any] = {name: payload.get(name) for name in _PLACE_INPUTS}
            request = request_parse(market, **inputs)
        except DomainError as exc:
            result.append(exc)
        else:
            result.append(Place(request, order_id))
    return result


def batch_write(state: MarketBook, commands: Sequence[QueuedCommand]) -> list[dict]:
    """Plan and write ``commands`` (one market's, in order) in the caller's transaction; return their outcomes.

    Outcomes are those :mod:`apps.orders.services.sequencer` stores: ``{"order_id": n}``, ``{"order_ids": [...]}``
    (a cancel of a user's open orders) or :func:`domain_outcome` of the refusal. ``state`` is changed (book, sequence); if this raises,
    the caller must roll back and set ``state.sequence = None`` (the book is then read again).
    """
    places = [c for c in commands if c.kind == CommandKind.PLACE]
    placers = sorted({c.payload["user_id"] for c in places})
    keyed = [(c.payload["user_id"], c.payload["client_order_id"]) for c in commands if c.payload.get("client_order_id")]
    cancel_ids = [c.payload["order_id"] for c in commands if c.kind == CommandKind.CANCEL and "order_id" in c.payload]
    assets = [state.base_id, state.quote_id]
    reads: dict[str, tuple[str, list]] = {"lock": (sql.LOCK_MARKET_FOR_BATCH, [state.market_id, len(places)])}
    if placers:
        reads["frozen"] = (sql.FROZEN_USERS, [placers])
        reads["rates"] = (sql.RATES, [sorted(set(placers) | state.book.user_ids())])
        reads["balances"] = (AVAILABLE_BALANCES_SQL, [placers, assets])
    if keyed:
        reads["by_client_id"] = (sql.ORDERS_BY_CLIENT_ID, [[u for u, _ in keyed], [k for _, k in keyed]])
    if cancel_ids:
        reads["by_id"] = (sql.ORDERS_BY_ID, [cancel_ids])
    with PreparedCursor() as cursor, localcontext(WIDE):
        rows = dict(zip(reads, cursor.pipeline(list(reads.values())), strict=True))
        frozen, by_client_id, by_id = rows.get("frozen", []), rows.get("by_client_id", []), rows.get("by_id", [])
        rate_rows, balance_rows = rows.get("rates", []), rows.get("balances", [])
        market, order_ids = sql.locked_market_for_batch(rows["lock"][0])
        if market.sequence != state.sequence:
            state.reload(cursor)
            if placers:
                cursor.execute(sql.RATES, [sorted(set(placers) | state.book.user_ids())])
                rate_rows = cursor.fetchall()
        rates = sql.rates_of(rate_rows)
        existing = {(row[3], row[0]): Existing(*row[1:]) for row in by_client_id}
        known = {row[0]: Existing(*row) for row in by_id}
        parsed = _parsed(commands, market, order_ids, {row[0] for row in frozen})
        read = {(u, a): Decimal(0) for u in placers for a in assets} | {(u, a): b for u, a, b in balance_rows}

        def plan_with(balances: dict[tuple[int, int], Decimal]) -> BatchPlan:
            planner = BatchPlanner(
                book=state.book,
                market=market,
                filters=_Filters(market),
                balances=dict(balances),
                rates=rates,
                existing=existing,
                known=known,
            )
            return planner.run(parsed)

        plan = plan_with(read)
        users = set(placers) | plan.user_ids
        accounts = TradingAccounts.lock(
            cursor,
            user_ids=users,
            assets=market.assets,
            fee_keys=[market_fee_shard_key(market.id)] if plan.trades else [],
        )
        locked = {key: accounts.available_balance(*key) for key in read}
        if locked != read:
            state.reload(cursor)
            plan = plan_with(locked)
            if not plan.user_ids <= users:
                raise Unplannable("the plan with the locked balances needs accounts that are not locked")
        outcomes = _outcomes(parsed, plan)
        done = (queue.MARK_DONE, [[c.id for c in commands], json.dumps(outcomes)])
        _write(cursor, state, market, plan, accounts, done)
        _operator_cancels_audit(commands, outcomes, plan)
    state.sequence = market.sequence + len(plan.changes)
    return outcomes


def _operator_cancels_audit(commands: Sequence[QueuedCommand], outcomes: list[dict], plan: BatchPlan) -> None:
    """Audit each operator's cancel the batch applied (:func:`order_cancel_audit`) in the batch's transaction, with
    the order's state as the batch cancelled it."""
    for command, outcome in zip(commands, outcomes, strict=True):
        operator_id = command.payload.get("operator_id")
        if command.kind == CommandKind.CANCEL and operator_id is not None and "order_id" in outcome:
            order_cancel_audit(
                order_id=outcome["order_id"],
                operator_id=operator_id,
                reason=command.payload["reason"],
                filled_qty=plan.updated[outcome["order_id"]].filled_qty,
            )


def _outcomes(
    parsed: Sequence[Place | Cancel | CancelByClientId | CancelAll | DomainError], plan: BatchPlan
) -> list[dict]:
    """The outcome of each planned command (see :func:`batch_write`); a placement's carries the order's state right
    after it (``"placed"``, :func:`~apps.orders.store.commands.placed_state`), its own change's, not a replay's."""
    placed = {c.taker_order_id: c.orders[c.taker_order_id] for c in plan.changes if c.taker_order_id is not None}
    outcomes = []
    for command, result in zip(parsed, plan.outcomes, strict=True):
        if isinstance(result, DomainError):
            outcomes.append(domain_outcome(result))
        elif isinstance(result, list):
            outcomes.append({"order_ids": result})
        elif isinstance(command, Place) and command.order_id == result:  # placed now (a replay names an older id)
            outcomes.append({"order_id": result, "placed": queue.placed_state(placed[result])})
        else:
            outcomes.append({"order_id": result})
    return outcomes


def _write(
    cursor, state: MarketBook, market: LockedMarket, plan: BatchPlan, accounts: TradingAccounts, done: tuple[str, list]
) -> None:
    """Write ``plan`` in two round trips: every entry (:func:`~apps.ledger.services.entry_ids_posting`, the other
    statements built while PostgreSQL posts them), then one pipeline of the new orders, the trades with the resting
    orders' new state, the candles, the sequence bump, the stream events and ``done`` (the commands' MARK_DONE,
    whose answers are published at the commit)."""
    now = timezone.now()
    statements: list[tuple[str, list]] = []
    after_trades: list[tuple[str, list]] = []
    with entry_ids_posting([_entry(accounts, market, entry) for entry in plan.entries]) as posting:
        if plan.placed:
            placed = order_rows.placed_order_params(plan.placed.values(), market_id=market.id, created_at=now)
            statements.append((order_rows.INSERT_ORDERS, placed))
        updated = order_rows.order_state_params(now, plan.updated) if plan.updated else []
        if plan.changes:
            after_trades.append((sql.BUMP_SEQUENCE, [len(plan.changes), market.id]))
            for order in plan.placed.values():
                state.statics.setdefault(order.id, _static_of(order, now))

        def events() -> list[tuple[int, dict]]:
            now_ms = _ms(now)
            return [(market.sequence + c.offset, _payload(c, state.statics, now_ms)) for c in plan.changes]

        for _, contributed in batch_written.send(
            sender=Order, market_id=market.id, time=now, fills=plan.fills, events=events
        ):
            after_trades.extend(cast(list[tuple[str, list]], contributed))  # django-stubs: a response is str | None
    for entry, entry_id in zip(plan.entries, posting.ids(), strict=True):
        if isinstance(entry, TradeRow):
            entry.entry_id = entry_id
    trades = order_rows.trade_row_params(market_id=market.id, trades=plan.trades, created_at=now)
    if plan.trades and plan.updated:
        statements.append(
            (
                f"WITH trades AS ({order_rows.INSERT_TRADES}) {order_rows.UPDATE_MAKERS}",
                trades + updated,
            )
        )
    elif plan.trades:
        statements.append((order_rows.INSERT_TRADES, trades))
    elif plan.updated:
        statements.append((order_rows.UPDATE_MAKERS, updated))
    statements += after_trades
    marked = cursor.pipeline([*statements, done])[-1]
    answers.marked_publish_at_commit(done[1][0], marked)
    for order_id, order_state in plan.updated.items():
        if order_state.status not in OPEN_STATUSES:
            state.statics.pop(order_id, None)
    for order in plan.placed.values():
        if order.status not in OPEN_STATUSES:
            state.statics.pop(order.id, None)


def _static_of(order: PlacedOrder, created_at: datetime) -> sql.OrderStatic:
    return sql.OrderStatic(
        user_id=order.user_id,
        client_order_id=order.client_order_id,
        side=order.side,
        type=order.type,
        time_in_force=order.time_in_force,
        price=order.price,
        qty=order.qty,
        quote_qty=order.quote_qty,
        post_only=order.post_only,
        stp=order.stp,
        created_at=created_at,
    )


def _entry(accounts: TradingAccounts, market: LockedMarket, entry: Hold | Release | TradeRow) -> EntryRequest:
    """The ledger's recipe (:mod:`apps.ledger.trading`) of one planned entry."""
    if isinstance(entry, Hold):
        return order_hold_entry(
            accounts, order_id=entry.order_id, user_id=entry.user_id, asset_id=entry.asset_id, amount=entry.amount
        )
    if isinstance(entry, Release):
        return order_release_entry(
            accounts, order_id=entry.order_id, user_id=entry.user_id, asset_id=entry.asset_id, amount=entry.amount
        )
    terms = FillTerms(
        trade_id=entry.id,
        base_id=market.base_id,
        quote_id=market.quote_id,
        buyer_id=entry.buyer_id,
        seller_id=entry.seller_id,
        qty=entry.qty,
        quote_qty=entry.quote_qty,
        buyer_fee=entry.buyer_fee,
        seller_fee=entry.seller_fee,
        fee_shard_key=market_fee_shard_key(market.id),
    )
    return trade_fill_entry(
        accounts,
        terms,
        metadata={"market": market.symbol, "taker_order": entry.taker_order_id, "maker_order": entry.maker_order_id},
    )


# -- stream events: the payload book_event_record reads from the tables, from what the plan knows ---------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _text(value: Decimal | None) -> str | None:
    """An amount as the columns' ``::text`` writes it: 18 places (amounts never have more, so nothing rounds)."""
    return None if value is None else f"{value:.18f}"


def _ms(moment: datetime) -> int:
    micros = (moment - _EPOCH) // timedelta(microseconds=1)
    return (micros + 500) // 1000


def _level(level: tuple[Decimal, Decimal] | None) -> list | None:
    return None if level is None else [_text(level[0]), _text(level[1])]


def _payload(change: BookChange, statics: dict[int, sql.OrderStatic], now_ms: int) -> dict:
    """The stream event of one change (:data:`apps.orders.events.batch_written`); ``now_ms`` the batch's time in
    milliseconds since the epoch."""
    orders = []
    for order_id in sorted(change.orders):
        s: OrderState = change.orders[order_id]
        static = statics[order_id]
        orders.append(
            {
                "id": order_id,
                "user_id": static.user_id,
                "client_order_id": static.client_order_id,
                "side": str(static.side),
                "type": str(static.type),
                "time_in_force": str(static.time_in_force),
                "price": _text(static.price),
                "qty": _text(static.qty),
                "quote_qty": _text(static.quote_qty),
                "post_only": static.post_only,
                "stp": str(static.stp),
                "filled_qty": _text(s.filled_qty),
                "filled_quote_qty": _text(s.filled_quote_qty),
                "fee_total": _text(s.fee_total),
                "status": str(s.status),
                "reject_reason": str(s.reject_reason),
                "created_at": _ms(static.created_at),
                "updated_at": now_ms,
            }
        )
    trades = [
        {
            "id": t.id,
            "number": t.taker_order_id * TRADE_NUMBER_BASE + t.seq,
            "price": _text(t.price),
            "qty": _text(t.qty),
            "quote_qty": _text(t.quote_qty),
            "taker_side": str(t.taker_side),
            "taker_order_id": t.taker_order_id,
            "maker_order_id": t.maker_order_id,
            "taker_user_id": t.taker_user_id,
            "maker_user_id": t.maker_user_id,
            "taker_fee": _text(t.taker_fee),
            "maker_fee": _text(t.maker_fee),
            "time": now_ms,
        }
        for t in change.trades
    ]
    return {
        "taker": change.taker_order_id,
        "cancel_client_order_id": change.cancel_client_order_id,
        "levels": [[str(side), _text(price), _text(qty) if qty else "0"] for side, price, qty in change.levels],
        "bid": _level(change.bid),
        "ask": _level(change.ask),
        "trades": trades,
        "orders": orders,
    }
