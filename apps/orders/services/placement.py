"""Order placement (:func:`order_place`): one transaction under the market's row lock (DESIGN.md
sections 6 and 7).

It parses the order and checks it against the market's filters
(:mod:`apps.orders.services.parsing`), plans the matching against the book
(:mod:`apps.orders.engine`: fills, self-trade prevention, fill-or-kill, post-only, fees,
all decided before anything is written), then writes: the order row, its hold
(``order:<id>:hold``), one journal entry per fill (``trade:<trade id>``), the releases of
what ended orders still hold (``order:<id>:release``), the trades and the resting orders'
new state. The journal entries are asked of the ledger (:mod:`apps.ledger.trading`) and
posted with one :func:`apps.ledger.services.entries_post` call. A rejection raises a
:class:`~apps.ledger.errors.DomainError` and the transaction (or, inside a caller's, the
savepoint) is rolled back: no order row, nothing held.

Locking: the market row (:mod:`apps.orders.store.markets`): every write of a market's
orders (placement, cancel) holds that lock, so the book read in the next statement holds
every earlier placement and nothing changes it until commit. The ledger accounts the
placement touches are locked all at once, in id order, by the statement that writes the
order row (:meth:`apps.ledger.trading.TradingAccounts.lock`), so two placements on two
markets sharing users take them in the same order and cannot deadlock each other; any
other deadlock or serialization failure runs the whole placement again
(:func:`retrying_atomic`).

Round trips (DESIGN.md section 6): BEGIN, the lock and the first book page go in one
pipeline; the order row and the account lock in one statement; the entries in one
``entries_post``; the trades and the resting orders' updates in one statement; statements
are prepared once per connection (:class:`apps.ledger.db.PreparedCursor`). The account's
trading freeze (:data:`apps.accounts.selectors.TRADING_FROZEN_SQL`) is read in the first one.

Streams: every transaction that bumps a market's sequence records exactly one book event
(:data:`apps.orders.events.book_changed`) with that sequence as its update id, as
its last statement under the lock; the relay publishes them in that order.
"""

from decimal import Decimal, localcontext
from typing import Any

from django.db import IntegrityError, connection
from django.utils import timezone

from apps.accounts.errors import TradingFrozen
from apps.accounts.selectors import TRADING_FROZEN_SQL
from apps.core.errors import DomainError, violated_constraint
from apps.ledger.amounts import fits, quantum
from apps.ledger.db import PreparedCursor
from apps.ledger.errors import IdempotencyConflict
from apps.ledger.services import EntryRequest, entries_post
from apps.ledger.trading import (
    FillTerms,
    TradingAccounts,
    market_fee_shard_key,
    order_hold_entry,
    order_release_entry,
    trade_fill_entry,
)
from apps.ledger.transactions import retrying_atomic

from ..engine.matching import WIDE, MatchPlan, Taker, plan_match
from ..engine.settlement import Settlement, hold_plan, maker_updates, outcome, settlements_plan
from ..errors import FokNotFillable, InvalidQuantity, MarketHalted, PostOnlyWouldTake
from ..events import book_changed, trades_executed
from ..models import OPEN_STATUSES, MarketStatus, Order, OrderStatus, OrderType, Side, TimeInForce
from ..store import orders as order_rows
from ..store.book import BOOK_PAGE, Book
from ..store.markets import (
    LOCK_MARKET_FOR_ORDER,
    LockedMarket,
    MarketShape,
    lock_market_for_order,
    locked_market_row,
    market_shape,
)
from .parsing import Request, limits_check, notional_check, request_parse

SHAPES: dict[str, MarketShape] = {}
"""The :class:`MarketShape` last seen per market symbol in this process."""


def _refuse_frozen(rows: list[tuple]) -> None:
    """Raise :class:`TradingFrozen` when :data:`~apps.accounts.selectors.TRADING_FROZEN_SQL` found a row."""
    if rows:
        raise TradingFrozen("Trading is frozen on this account; open orders can still be cancelled.")


def _book_for(
    cursor, market: MarketShape | LockedMarket, request: Request, first_page: list[tuple] | None = None
) -> Book:
    """The side of ``market``'s book that ``request`` may match (one row is enough for post-only)."""
    return Book(
        cursor,
        market_id=market.id,
        side=Side.SELL if request.side == Side.BUY else Side.BUY,
        limit_price=request.price,
        taker_id=request.user_id,
        page=1 if request.post_only else BOOK_PAGE,
        first_page=first_page,
    )


def _same_request(order: Order, request: Request, market_id: int) -> bool:
    """Whether ``order`` is what ``request`` on the market ``market_id`` asks for (a replay of it)."""
    return (
        order.market_id == market_id
        and order.side == request.side
        and order.type == request.type
        and order.price == request.price
        and order.qty == request.qty
        and order.quote_qty == request.quote_qty
        and order.time_in_force == request.time_in_force
        and order.post_only == request.post_only
        and order.stp == request.stp
    )


def _find_replay(request: Request, market: LockedMarket) -> Order | None:
    """The order already placed with this ``client_order_id``; a different request is a conflict."""
    order = Order.objects.filter(user_id=request.user_id, client_order_id=request.client_order_id).first()
    if order is None:
        return None
    if not _same_request(order, request, market.id):
        raise IdempotencyConflict(
            f"client_order_id {request.client_order_id!r} was already used for another order.",
            fields={"client_order_id": "Already used for another order."},
        )
    return order


def order_replay(*, user_id: int, market: str, client_order_id: str = "", **order: Any) -> Order | None:
    """The order ``user_id`` already placed with ``client_order_id`` when this placement (:func:`order_place`'s
    arguments) asks for that very order: what :func:`order_place` would return, read without locking or queueing
    anything, so a retry is answered even while the market's sequencer is busy or stopped.

    ``None`` when it cannot answer so, and :func:`order_place` then decides (with its error, if any): no
    ``client_order_id``, no order under it, another request under it, a request that does not parse, or the
    account's trading frozen (refused before a replay).
    """
    if not client_order_id:
        return None
    stored = (
        Order.objects.select_related("market__base", "market__quote")
        .filter(user_id=user_id, client_order_id=client_order_id)
        .first()
    )
    if stored is None or stored.market.symbol != market:
        return None
    try:
        with localcontext(WIDE):
            request = request_parse(
                market_shape(stored.market), user_id=user_id, client_order_id=client_order_id, **order
            )
    except DomainError:
        return None
    with connection.cursor() as cursor:
        cursor.execute(TRADING_FROZEN_SQL, [user_id])
        if cursor.fetchone() is not None:
            return None
    return stored if _same_request(stored, request, stored.market_id) else None


@retrying_atomic
def order_place(
    *,
    user_id: int,
    market: str,
    side: str,
    type: str = OrderType.LIMIT,
    price: str | Decimal | None = None,
    qty: str | Decimal | None = None,
    quote_qty: str | Decimal | None = None,
    time_in_force: str | None = None,
    post_only: bool = False,
    stp: str | None = None,
    client_order_id: str = "",
) -> Order:
    """Place an order on the market ``market`` (symbol) and match it at once; return the order as it ends up.

    Arguments are the API's order fields. Amounts are plain decimal strings or
    ``Decimal``: ``price`` in quote per base (a multiple of the tick), ``qty`` in base (a
    multiple of the step, within ``min_qty``..``max_qty``), ``quote_qty`` a market buy's
    budget in quote. ``time_in_force`` defaults to GTC for limit orders and IOC for
    market orders; ``stp`` (self-trade prevention) to ``expire_taker``.

    What is held (``order:<id>:hold``, Dr available, Cr held): a limit buy ``qty *
    price`` quote; a market buy by budget the budget; a sell ``qty`` base; a market buy
    by base quantity the exact cost of its fills, found by walking the book under the
    lock before anything is written (so it never holds more or less than it spends; a
    user who cannot pay for the whole walk gets ``insufficient_funds``). Each fill
    (``trade:<taker order id>-<n>``) executes at the maker's price and consumes that from
    the hold; when the order ends, what is left is released (``order:<id>:release``),
    which returns a buyer's price improvement and a budget's unspendable dust. A GTC
    limit remainder rests in the book holding what is left. A market order on a market with
    a ``market_order_price_band`` fills no further than that percentage from the best price
    it meets; the rest ends ``expired`` with the reason ``price_protection``.

    Status: ``filled``; ``open``/``partially_filled`` (resting); ``expired`` (IOC or
    market remainder, empty book, self-trade prevention of the taker).

    Raises, with nothing written and nothing held: :class:`~apps.accounts.errors.TradingFrozen`
    (an operator froze the account's trading), :class:`NotFound` (market),
    :class:`MarketHalted`, :class:`InvalidPrice`, :class:`InvalidQuantity`,
    :class:`MinNotional`, :class:`PostOnlyWouldTake`, :class:`FokNotFillable`,
    :class:`~apps.ledger.errors.InsufficientFunds`, :class:`DomainError` (malformed
    choice), :class:`IdempotencyConflict` (``client_order_id`` reused for another order;
    the same order again returns the original). Keeps invariants 3, 4 and 8: an ended
    order holds nothing, an open one holds exactly its ``held_remaining``.
    """
    inputs: dict[str, Any] = {
        "user_id": user_id,
        "side": side,
        "type": type,
        "price": price,
        "qty": qty,
        "quote_qty": quote_qty,
        "time_in_force": time_in_force,
        "post_only": post_only,
        "stp": stp,
        "client_order_id": client_order_id,
    }
    with PreparedCursor() as cursor, localcontext(WIDE):
        request = first_page = None
        shape = SHAPES.get(market)
        if shape is not None:
            try:
                request = request_parse(shape, **inputs)
            except DomainError:
                pass  # judged again with the market as locked (the shape kept here may be out of date)
        if request is not None and shape is not None:
            # One round trip: BEGIN, the market lock (which draws the order id), the first book page
            # and the account's trading freeze.
            book = _book_for(cursor, shape, request)
            lock_rows, first_page, frozen = cursor.pipeline(
                [(LOCK_MARKET_FOR_ORDER, [market]), book.page_query(), (TRADING_FROZEN_SQL, [user_id])]
            )
            _refuse_frozen(frozen)
            locked, order_id = locked_market_row(lock_rows[0] if lock_rows else None, market)
            if locked.shape != shape:
                request = first_page = None
        else:
            cursor.execute(TRADING_FROZEN_SQL, [user_id])
            _refuse_frozen(cursor.fetchall())
            locked, order_id = lock_market_for_order(cursor, market)
        SHAPES[market] = locked.shape
        if request is None:
            request = request_parse(locked, **inputs)
        if request.client_order_id:
            replay = _find_replay(request, locked)
            if replay is not None:  # the lock bumped the sequence: an event with no change keeps ids gapless
                book_changed.send(
                    sender=Order, market_id=locked.id, update_id=locked.sequence, order_ids=[], taker_order_id=None
                )
                return replay
        limits_check(locked, request)
        book = _book_for(cursor, locked, request, first_page=first_page)
        if locked.status != MarketStatus.ACTIVE:
            raise MarketHalted(f"Market {locked.symbol} is halted.", field="market")

        taker = Taker(request.user_id, request.side, request.price, request.qty, request.quote_qty, request.stp)
        if request.post_only:
            best = next(iter(book), None)
            if best is not None and taker.crosses(best.price):
                raise PostOnlyWouldTake(
                    f"Would match the resting order at {best.price.normalize():f}.", field="post_only"
                )
            plan = MatchPlan()
        else:
            band = locked.market_order_price_band if request.type == OrderType.MARKET else None
            plan = plan_match(taker, book, step_size=locked.step_size, price_band=band)
        notional_check(locked, request, plan)
        status, reject_reason = outcome(type=request.type, time_in_force=request.time_in_force, plan=plan)
        if request.time_in_force == TimeInForce.FOK and status != OrderStatus.FILLED:
            raise FokNotFillable("The order cannot be filled completely now.", field="time_in_force")
        return _execute(cursor, locked, order_id, request, plan, book.taker_rate, status, reject_reason)


def _execute(
    cursor,
    market: LockedMarket,
    order_id: int,
    request: Request,
    plan: MatchPlan,
    taker_rate: Decimal | None,
    status: str,
    reject_reason: str,
) -> Order:
    """Write the planned placement: order row (with the account lock), every entry in one
    ``entries_post`` (hold, fills, releases), then trades and resting orders, candles, the book event."""
    buy = request.side == Side.BUY
    held_asset_id = market.quote_id if buy else market.base_id
    held_amount, held_left = hold_plan(
        side=request.side, price=request.price, qty=request.qty, quote_qty=request.quote_qty, plan=plan
    )
    if not fits(held_amount):
        raise InvalidQuantity(f"The order's value {held_amount:f} is beyond what an amount can be.", field="qty")
    ended = status not in OPEN_STATUSES

    if plan.fills and taker_rate is None:  # the book reads the taker's rate with the first maker it loads
        raise RuntimeError("fills were planned without the taker's fee rate")
    taker_rate = taker_rate if taker_rate is not None and plan.fills else Decimal(0)
    settlements = settlements_plan(
        taker_side=request.side,
        taker_rate=taker_rate,
        plan=plan,
        base_decimals=market.base_decimals,
        quote_decimals=market.quote_decimals,
    )
    now = timezone.now()
    base_q, quote_q = quantum(market.base_decimals), quantum(market.quote_decimals)
    held_q = quote_q if buy else base_q
    order = Order(
        id=order_id,
        market_id=market.id,
        user_id=request.user_id,
        client_order_id=request.client_order_id,
        side=request.side,
        type=request.type,
        price=request.price,
        qty=request.qty,
        quote_qty=request.quote_qty,
        time_in_force=request.time_in_force,
        post_only=request.post_only,
        stp=request.stp,
        status=status,
        reject_reason=reject_reason,
        filled_qty=plan.filled_qty.quantize(base_q),
        filled_quote_qty=plan.filled_quote_qty.quantize(quote_q),
        fee_total=sum((s.taker_fee for s in settlements), Decimal(0)).quantize(base_q if buy else quote_q),
        held_asset_id=held_asset_id,
        held_amount=held_amount.quantize(held_q),
        held_remaining=(Decimal(0) if ended else held_left).quantize(held_q),
        created_at=now,
        updated_at=now,
    )
    for settlement in settlements:
        settlement.trade_id = f"{order.id}-{settlement.seq}"
    users = {order.user_id} | {fill.maker.user_id for fill in plan.fills} | {m.user_id for m in plan.expired_makers}
    accounts = _insert_order_and_lock_accounts(
        cursor, order, user_ids=users, market=market, fee_keys=[market_fee_shard_key(market.id)] if settlements else []
    )
    updates = maker_updates(taker_side=request.side, settlements=settlements, expired=plan.expired_makers)

    entries: list[EntryRequest] = []
    if held_amount:
        entries.append(
            order_hold_entry(
                accounts, order_id=order.id, user_id=order.user_id, asset_id=held_asset_id, amount=held_amount
            )
        )
    entries += [_fill_entry(accounts, market, order, s) for s in settlements]
    if ended and held_left:
        entries.append(
            order_release_entry(
                accounts, order_id=order.id, user_id=order.user_id, asset_id=held_asset_id, amount=held_left
            )
        )
    makers_held_asset_id = market.base_id if buy else market.quote_id
    entries += [
        order_release_entry(
            accounts, order_id=u.maker.id, user_id=u.maker.user_id, asset_id=makers_held_asset_id, amount=u.release
        )
        for u in updates
        if u.release
    ]
    posted = entries_post(entries) if entries else []
    fill_entries = posted[1 if held_amount else 0 :][: len(settlements)]
    for settlement, entry in zip(settlements, fill_entries, strict=True):
        settlement.entry_id = entry.id

    if updates:
        makers_params = order_rows.maker_update_params(order.updated_at, updates)
        if settlements:
            trades_params = order_rows.trade_params(
                market_id=market.id, taker=order, taker_rate=taker_rate, settlements=settlements, created_at=now
            )
            cursor.execute(
                f"WITH trades AS ({order_rows.INSERT_TRADES}) {order_rows.UPDATE_MAKERS}", trades_params + makers_params
            )
        else:
            cursor.execute(order_rows.UPDATE_MAKERS, makers_params)
    trades_executed.send(sender=Order, market_id=market.id, time=now, fills=plan.fills)
    book_changed.send(
        sender=Order,
        market_id=market.id,
        update_id=market.sequence,
        order_ids=[order.id, *(fill.maker.id for fill in plan.fills), *(maker.id for maker in plan.expired_makers)],
        taker_order_id=order.id,
    )
    return order


def _fill_entry(accounts: TradingAccounts, market: LockedMarket, taker: Order, settlement: Settlement) -> EntryRequest:
    """The journal entry of one fill between ``taker`` and its maker (:func:`apps.ledger.trading.trade_fill_entry`)."""
    fill = settlement.fill
    if taker.side == Side.BUY:
        buyer, seller, buyer_fee, seller_fee = (
            taker.user_id,
            fill.maker.user_id,
            settlement.taker_fee,
            settlement.maker_fee,
        )
    else:
        buyer, seller, buyer_fee, seller_fee = (
            fill.maker.user_id,
            taker.user_id,
            settlement.maker_fee,
            settlement.taker_fee,
        )
    terms = FillTerms(
        trade_id=settlement.trade_id,
        base_id=market.base_id,
        quote_id=market.quote_id,
        buyer_id=buyer,
        seller_id=seller,
        qty=fill.qty,
        quote_qty=fill.quote_qty,
        buyer_fee=buyer_fee,
        seller_fee=seller_fee,
        fee_shard_key=market_fee_shard_key(market.id),
    )
    return trade_fill_entry(
        accounts, terms, metadata={"market": market.symbol, "taker_order": taker.id, "maker_order": fill.maker.id}
    )


def _insert_order_and_lock_accounts(
    cursor, order: Order, *, user_ids: set[int], market: LockedMarket, fee_keys: list[str]
) -> TradingAccounts:
    """INSERT the order row and lock the placement's accounts, in one statement.

    A ``client_order_id`` taken meanwhile (by a placement on another market) is an
    :class:`IdempotencyConflict`.
    """
    try:
        return TradingAccounts.lock(
            cursor,
            user_ids=user_ids,
            assets=market.assets,
            fee_keys=fee_keys,
            with_statement=order_rows.INSERT_ORDERS,
            with_params=order_rows.order_params([order]),
        )
    except IntegrityError as exc:
        if violated_constraint(exc) == "order_client_id_per_user":
            raise IdempotencyConflict(
                f"client_order_id {order.client_order_id!r} is being used by another order.",
                fields={"client_order_id": "Already used for another order."},
            ) from None
        raise
