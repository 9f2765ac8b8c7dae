"""The batch planner: a sequencer's batch of placements and cancels decided in memory, one after another,
exactly as inline placement (:mod:`apps.orders.services.placement`) and cancel
(:mod:`apps.orders.services.cancel`) would decide them, before anything is written.

Pure (:mod:`apps.orders.engine`). :class:`BatchPlanner` walks the in-memory book
(:class:`~apps.orders.engine.book.OrderBook`) and changes it as it goes; it tracks each
batch user's available balance of the market's two assets (read from the locked accounts)
so that every hold is checked against what the commands before it left: an order that
cannot be held gets its own :class:`~apps.ledger.errors.InsufficientFunds` outcome (the
message ``entries_post`` would give) and the batch goes on. The checks run in inline
placement's order: (trading frozen and parsing: done by the caller) replay of a
``client_order_id``, quantity limits, halted market, post-only, matching (fee rates read as
each resting order is met), minimum notional, fill-or-kill, the value's size, the hold.

What the service writes (:class:`BatchPlan`): the new orders (in their state at the end of
the batch), the end state of the resting orders it changed that existed before it, the
trades, the journal entries as recipes in posting order (:class:`Hold`, :class:`TradeRow`
for a fill, :class:`Release`), the fills for the candles, one :class:`BookChange` per
command that bumps the market's sequence (each placement, replay and cancel: refusals bump
nothing), and one outcome per command (an order id or the :class:`DomainError`).

Amounts are ``Decimal`` in the units of :mod:`apps.orders.engine.matching`.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from typing import Protocol

from apps.core.errors import DomainError, InvalidState, NotFound
from apps.ledger.errors import IdempotencyConflict, InsufficientFunds

from ..errors import CancelRestricted, FokNotFillable, InvalidQuantity, MarketHalted, NoFeeSchedule, PostOnlyWouldTake
from .book import OrderBook
from .matching import WIDE, Fill, Maker, MatchPlan, Taker, plan_match
from .settlement import hold_plan, maker_updates, outcome, settlements_plan
from .vocabulary import OPEN_STATUSES, EndReason, OrderStatus, OrderType, Side, TimeInForce

_AMOUNT_LIMIT = Decimal(10) ** 20  # an amount column holds less (apps.ledger.amounts.fits)


@dataclass(frozen=True)
class Request:
    """An order request, parsed and checked against the market's filters
    (:func:`apps.orders.services.parsing.request_parse`): amounts ``Decimal``, choices their values."""

    user_id: int
    side: str
    type: str
    price: Decimal | None
    qty: Decimal | None
    quote_qty: Decimal | None
    time_in_force: str
    post_only: bool
    stp: str
    client_order_id: str


class MarketTerms(Protocol):
    """The market as locked for the batch (:class:`apps.orders.store.markets.LockedMarket`)."""

    @property
    def id(self) -> int: ...

    @property
    def symbol(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def base_id(self) -> int: ...

    @property
    def quote_id(self) -> int: ...

    @property
    def step_size(self) -> Decimal: ...

    @property
    def market_order_price_band(self) -> Decimal | None: ...

    @property
    def base_code(self) -> str: ...

    @property
    def base_decimals(self) -> int: ...

    @property
    def quote_code(self) -> str: ...

    @property
    def quote_decimals(self) -> int: ...


class Filters(Protocol):
    """The market's filters that need the service's rules: both raise a :class:`DomainError`."""

    def limits(self, request: Request) -> None:
        """``min_qty``..``max_qty`` (:func:`apps.orders.services.parsing.limits_check`)."""

    def notional(self, request: Request, plan: MatchPlan) -> None:
        """``min_notional`` (:func:`apps.orders.services.parsing.notional_check`)."""


@dataclass(frozen=True)
class Rates:
    """Fee rates in force: per user ``(maker, taker)`` from a tier, else the default schedule's.

    ``default`` is ``None`` when no default schedule exists: then no taker has a rate (a maker
    with a tier still has its tier's maker rate), as the book's SQL reads them.
    """

    default: tuple[Decimal, Decimal] | None
    tiers: dict[int, tuple[Decimal, Decimal]] = field(default_factory=dict)

    def maker(self, user_id: int) -> Decimal | None:
        tier = self.tiers.get(user_id)
        return tier[0] if tier is not None else (None if self.default is None else self.default[0])

    def taker(self, user_id: int) -> Decimal | None:
        if self.default is None:
            return None
        tier = self.tiers.get(user_id)
        return (tier or self.default)[1]


@dataclass(frozen=True)
class Existing:
    """An order already stored, as a replay or a cancel needs it (read before planning).

    A replay compares the request fields; a cancel of an order that is not resting reads
    ``user_id``, ``status`` and ``market_id``.
    """

    id: int
    market_id: int
    user_id: int
    status: str
    side: str
    type: str
    price: Decimal | None
    qty: Decimal | None
    quote_qty: Decimal | None
    time_in_force: str
    post_only: bool
    stp: str


@dataclass(frozen=True)
class Place:
    """A parsed placement; ``order_id`` is the id drawn for it (unused if it is refused)."""

    request: Request
    order_id: int


@dataclass(frozen=True)
class Cancel:
    """A cancel: ``user_id`` the owner asking (``None`` for an operator or the system)."""

    order_id: int
    user_id: int | None
    by_operator: bool
    cancel_client_order_id: str = ""  # the cancel request's own client id (its execution report's c), if any
    only_status: str = ""  # cancel only an order in this status (open, partially_filled): CancelRestricted else


@dataclass(frozen=True)
class CancelByClientId:
    """A cancel of the order ``user_id`` placed with ``client_order_id`` (Binance's ``origClientOrderId``), found
    when the command's turn comes: also an order placed by a command queued before it."""

    user_id: int
    client_order_id: str
    by_operator: bool
    cancel_client_order_id: str = ""
    only_status: str = ""  # as Cancel's


@dataclass(frozen=True)
class CancelAll:
    """A cancel of every open order ``user_id`` has on the market when the command's turn comes (Binance's
    ``DELETE /api/v3/openOrders``), including the orders placed by the commands before it in the queue."""

    user_id: int
    by_operator: bool


@dataclass
class PlacedOrder:
    """An order the batch places: the values of its row as the batch leaves it."""

    id: int
    user_id: int
    client_order_id: str
    side: str
    type: str
    price: Decimal | None
    qty: Decimal | None
    quote_qty: Decimal | None
    time_in_force: str
    post_only: bool
    stp: str
    status: str
    reject_reason: str
    filled_qty: Decimal
    filled_quote_qty: Decimal
    fee_total: Decimal
    held_asset_id: int
    held_amount: Decimal
    held_remaining: Decimal


@dataclass(frozen=True)
class OrderState:
    """What a change writes of an order: fills, fees, the hold left and the state."""

    filled_qty: Decimal
    filled_quote_qty: Decimal
    fee_total: Decimal
    held_remaining: Decimal
    status: str
    reject_reason: str


@dataclass(frozen=True)
class Hold:
    """``order:<id>:hold`` of ``amount`` of the asset (Dr available, Cr held)."""

    order_id: int
    user_id: int
    asset_id: int
    amount: Decimal


@dataclass(frozen=True)
class Release:
    """``order:<id>:release`` of ``amount`` of the asset (Dr held, Cr available)."""

    order_id: int
    user_id: int
    asset_id: int
    amount: Decimal


@dataclass
class TradeRow:
    """One fill: the trade row and its journal entry (``trade:<id>``); ``entry_id`` is set once posted."""

    id: str
    taker_order_id: int
    maker_order_id: int
    seq: int
    taker_user_id: int
    maker_user_id: int
    taker_side: str
    price: Decimal
    qty: Decimal
    quote_qty: Decimal
    taker_fee: Decimal
    maker_fee: Decimal
    taker_fee_rate: Decimal
    maker_fee_rate: Decimal
    entry_id: int = 0

    @property
    def buyer_id(self) -> int:
        return self.taker_user_id if self.taker_side == Side.BUY else self.maker_user_id

    @property
    def seller_id(self) -> int:
        return self.maker_user_id if self.taker_side == Side.BUY else self.taker_user_id

    @property
    def buyer_fee(self) -> Decimal:
        return self.taker_fee if self.taker_side == Side.BUY else self.maker_fee

    @property
    def seller_fee(self) -> Decimal:
        return self.maker_fee if self.taker_side == Side.BUY else self.taker_fee


@dataclass(frozen=True)
class BookChange:
    """One sequence bump of the batch (its ``offset``-th, from 1), as the streams publish it.

    ``orders`` maps each order the change wrote to its state right after the change;
    ``levels`` the ``(side, price, quantity resting)`` of their prices; ``bid``/``ask`` the best
    levels after it; ``trades`` the taker's fills (``taker_order_id`` ``None`` for a cancel or a replay);
    ``cancel_client_order_id`` a cancel's own client id, if it had one.
    """

    offset: int
    taker_order_id: int | None
    orders: dict[int, OrderState]
    levels: list[tuple[str, Decimal, Decimal]]
    bid: tuple[Decimal, Decimal] | None
    ask: tuple[Decimal, Decimal] | None
    trades: list[TradeRow]
    cancel_client_order_id: str = ""


@dataclass
class BatchPlan:
    """Everything the batch writes, and each command's outcome (an order id, the ids a :class:`CancelAll`
    cancelled, or the error refusing it)."""

    outcomes: list[int | list[int] | DomainError] = field(default_factory=list)
    placed: dict[int, PlacedOrder] = field(default_factory=dict)
    updated: dict[int, OrderState] = field(default_factory=dict)
    trades: list[TradeRow] = field(default_factory=list)
    entries: list[Hold | Release | TradeRow] = field(default_factory=list)
    fills: list[Fill] = field(default_factory=list)
    changes: list[BookChange] = field(default_factory=list)

    @property
    def user_ids(self) -> set[int]:
        """Every user whose accounts the entries touch."""
        users = set()
        for entry in self.entries:
            if isinstance(entry, TradeRow):
                users |= {entry.taker_user_id, entry.maker_user_id}
            else:
                users.add(entry.user_id)
        return users


class Unplannable(Exception):
    """The planner cannot decide the batch (a cancel names another market's order, or an open order the
    in-memory book lacks): the caller rebuilds the book and applies the batch per command."""


def _amount(value: Decimal, decimals: int) -> str:
    return f"{value.quantize(Decimal(1).scaleb(-decimals)):f}"


class BatchPlanner:
    """Plans one batch on ``book`` (changed in place: on a failed write, rebuild it from the database).

    ``balances`` maps ``(user id, asset id)`` to the available balance of every user placing
    in the batch (both assets of the market) and is changed as holds, fills and releases are
    planned. ``existing`` maps ``(user id, client_order_id)`` to the stored order of the
    batch's placements that give one, and ``known`` order ids to the stored orders its
    cancels name (as stored before the batch).
    """

    def __init__(
        self,
        *,
        book: OrderBook,
        market: MarketTerms,
        filters: Filters,
        balances: dict[tuple[int, int], Decimal],
        rates: Rates,
        existing: dict[tuple[int, str], Existing] | None = None,
        known: dict[int, Existing] | None = None,
    ):
        self.book, self.market, self.filters, self.balances, self.rates = book, market, filters, balances, rates
        self.existing = existing or {}
        self.known = known or {}
        self.plan = BatchPlan()
        self.by_client_id: dict[tuple[int, str], PlacedOrder] = {}
        self.left: dict[int, int] = {}  # owner of each order that left the book during the batch

    def run(self, commands: Sequence[Place | Cancel | CancelByClientId | CancelAll | DomainError]) -> BatchPlan:
        """Plan ``commands`` in order (a :class:`DomainError` is a command already refused by the caller)."""
        for command in commands:
            result: int | list[int]
            try:
                if isinstance(command, DomainError):
                    raise command
                if isinstance(command, Place):
                    result = self.place(command)
                elif isinstance(command, Cancel):
                    result = self.cancel(command)
                elif isinstance(command, CancelByClientId):
                    result = self.cancel_by_client_id(command)
                else:
                    result = self.cancel_all(command)
            except DomainError as exc:
                self.plan.outcomes.append(exc)
            else:
                self.plan.outcomes.append(result)
        return self.plan

    # -- balances ---------------------------------------------------------------------------------------

    def _credit(self, user_id: int, asset_id: int, amount: Decimal) -> None:
        key = (user_id, asset_id)
        if key in self.balances:  # users not placing in the batch are never checked
            self.balances[key] += amount

    def _check_hold(self, user_id: int, asset_id: int, amount: Decimal) -> None:
        available = self.balances.get((user_id, asset_id), Decimal(0))
        if amount > available:
            code, decimals = (
                (self.market.quote_code, self.market.quote_decimals)
                if asset_id == self.market.quote_id
                else (self.market.base_code, self.market.base_decimals)
            )
            raise InsufficientFunds(
                f"Insufficient {code}: {_amount(available, decimals)} available, {_amount(amount, decimals)} needed."
            )

    # -- placement --------------------------------------------------------------------------------------

    def _replay(self, request: Request) -> int | None:
        key = (request.user_id, request.client_order_id)
        order: PlacedOrder | Existing | None = self.by_client_id.get(key) or self.existing.get(key)
        if order is None:
            return None
        market_id = order.market_id if isinstance(order, Existing) else self.market.id
        same = (
            market_id == self.market.id
            and order.side == request.side
            and order.type == request.type
            and order.price == request.price
            and order.qty == request.qty
            and order.quote_qty == request.quote_qty
            and order.time_in_force == request.time_in_force
            and order.post_only == request.post_only
            and order.stp == request.stp
        )
        if not same:
            raise IdempotencyConflict(
                f"client_order_id {request.client_order_id!r} was already used for another order.",
                fields={"client_order_id": "Already used for another order."},
            )
        return order.id

    def _walk(self, request: Request) -> Iterator[Maker]:
        """The resting orders ``request`` may meet, best first, each with its owner's maker rate in force."""
        taker_rate = self.rates.taker(request.user_id)
        opposite = Side.SELL if request.side == Side.BUY else Side.BUY
        for maker in self.book.makers(opposite, request.price):
            rate = self.rates.maker(maker.user_id)
            if rate is None or taker_rate is None:
                raise NoFeeSchedule("Trading is paused: no default fee schedule is set.")
            maker.fee_rate = rate
            yield maker

    def place(self, command: Place) -> int:
        """Plan one placement (see the module for the order of the checks); returns its order id."""
        request, market = command.request, self.market
        if request.client_order_id:
            replayed = self._replay(request)
            if replayed is not None:
                self._change(taker_order_id=None, orders={}, prices=[])
                return replayed
        self.filters.limits(request)
        if market.status != "active":
            raise MarketHalted(f"Market {market.symbol} is halted.", field="market")
        taker = Taker(request.user_id, request.side, request.price, request.qty, request.quote_qty, request.stp)
        with localcontext(WIDE):
            if request.post_only:
                best = next(self._walk(request), None)
                if best is not None and taker.crosses(best.price):
                    raise PostOnlyWouldTake(
                        f"Would match the resting order at {best.price.normalize():f}.", field="post_only"
                    )
                plan = MatchPlan()
            else:
                band = market.market_order_price_band if request.type == OrderType.MARKET else None
                plan = plan_match(taker, self._walk(request), step_size=market.step_size, price_band=band)
            self.filters.notional(request, plan)
            status, reason = outcome(type=request.type, time_in_force=request.time_in_force, plan=plan)
            if request.time_in_force == TimeInForce.FOK and status != OrderStatus.FILLED:
                raise FokNotFillable("The order cannot be filled completely now.", field="time_in_force")
            held_amount, held_left = hold_plan(
                side=request.side, price=request.price, qty=request.qty, quote_qty=request.quote_qty, plan=plan
            )
            if abs(held_amount) >= _AMOUNT_LIMIT:
                raise InvalidQuantity(
                    f"The order's value {held_amount:f} is beyond what an amount can be.", field="qty"
                )
            buy = request.side == Side.BUY
            held_asset = market.quote_id if buy else market.base_id
            if held_amount:
                self._check_hold(request.user_id, held_asset, held_amount)
            return self._accept(command, plan, status, reason, held_asset, held_amount, held_left)

    def _accept(
        self,
        command: Place,
        plan: MatchPlan,
        status: str,
        reason: str,
        held_asset: int,
        held_amount: Decimal,
        held_left: Decimal,
    ) -> int:
        """Record an accepted placement: its row, entries, trades, the makers' new state, the book, balances."""
        request, market, order_id = command.request, self.market, command.order_id
        buy = request.side == Side.BUY
        taker_rate = self.rates.taker(request.user_id) if plan.fills else None
        taker_rate = taker_rate if taker_rate is not None else Decimal(0)
        settlements = settlements_plan(
            taker_side=request.side,
            taker_rate=taker_rate,
            plan=plan,
            base_decimals=market.base_decimals,
            quote_decimals=market.quote_decimals,
        )
        ended = status not in OPEN_STATUSES
        order = PlacedOrder(
            id=order_id,
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
            reject_reason=reason,
            filled_qty=plan.filled_qty,
            filled_quote_qty=plan.filled_quote_qty,
            fee_total=sum((s.taker_fee for s in settlements), Decimal(0)),
            held_asset_id=held_asset,
            held_amount=held_amount,
            held_remaining=Decimal(0) if ended else held_left,
        )
        self.plan.placed[order_id] = order
        if request.client_order_id:
            self.by_client_id[(request.user_id, request.client_order_id)] = order
        if held_amount:
            self.plan.entries.append(Hold(order_id, request.user_id, held_asset, held_amount))
            self._credit(request.user_id, held_asset, -held_amount)
        trades = []
        for s in settlements:
            fill = s.fill
            trade = TradeRow(
                id=f"{order_id}-{s.seq}",
                taker_order_id=order_id,
                maker_order_id=fill.maker.id,
                seq=s.seq,
                taker_user_id=request.user_id,
                maker_user_id=fill.maker.user_id,
                taker_side=request.side,
                price=fill.price,
                qty=fill.qty,
                quote_qty=fill.quote_qty,
                taker_fee=s.taker_fee,
                maker_fee=s.maker_fee,
                taker_fee_rate=taker_rate,
                maker_fee_rate=fill.maker.fee_rate,
            )
            trades.append(trade)
            self._credit(trade.buyer_id, market.base_id, fill.qty - trade.buyer_fee)
            self._credit(trade.seller_id, market.quote_id, fill.quote_qty - trade.seller_fee)
        self.plan.trades += trades
        self.plan.entries += trades
        self.plan.fills += plan.fills
        if ended and held_left:
            self.plan.entries.append(Release(order_id, request.user_id, held_asset, held_left))
            self._credit(request.user_id, held_asset, held_left)

        updates = maker_updates(taker_side=request.side, settlements=settlements, expired=plan.expired_makers)
        makers_asset = market.base_id if buy else market.quote_id
        states = {order_id: self._state_of(order)}
        prices = [(request.side, request.price)]
        for u in updates:
            maker = u.maker
            state = OrderState(
                maker.filled_qty, maker.filled_quote_qty, maker.fee_total, maker.held_remaining, u.status, u.reason
            )
            self._record(maker.id, state)
            states[maker.id] = state
            prices.append((maker.side, maker.price))
            if maker.id in self.book:
                if u.status in OPEN_STATUSES:
                    self.book.refresh(maker.id)
                else:
                    self.book.remove(maker.id)
                    self.left[maker.id] = maker.user_id
            if u.release:
                self.plan.entries.append(Release(maker.id, maker.user_id, makers_asset, u.release))
                self._credit(maker.user_id, makers_asset, u.release)
        if not ended:
            assert request.price is not None and request.qty is not None  # only a GTC limit order rests
            self.book.add(
                Maker(
                    id=order_id,
                    user_id=request.user_id,
                    side=request.side,
                    price=request.price,
                    qty=request.qty,
                    filled_qty=order.filled_qty,
                    filled_quote_qty=order.filled_quote_qty,
                    fee_total=order.fee_total,
                    held_remaining=order.held_remaining,
                    fee_rate=Decimal(0),  # read again each time it is met (_walk)
                )
            )
        self._change(taker_order_id=order_id, orders=states, prices=prices, trades=trades)
        return order_id

    @staticmethod
    def _state_of(order: PlacedOrder) -> OrderState:
        return OrderState(
            order.filled_qty,
            order.filled_quote_qty,
            order.fee_total,
            order.held_remaining,
            order.status,
            order.reject_reason,
        )

    def _record(self, order_id: int, state: OrderState) -> None:
        """Keep ``state`` as the order's end state: in its new row if the batch placed it, else as an update."""
        placed = self.plan.placed.get(order_id)
        if placed is None:
            self.plan.updated[order_id] = state
            return
        placed.filled_qty, placed.filled_quote_qty, placed.fee_total = (
            state.filled_qty,
            state.filled_quote_qty,
            state.fee_total,
        )
        placed.held_remaining, placed.status, placed.reject_reason = (
            state.held_remaining,
            state.status,
            state.reject_reason,
        )

    def _change(
        self,
        *,
        taker_order_id: int | None,
        orders: dict[int, OrderState],
        prices: list[tuple[str, Decimal | None]],
        trades: list[TradeRow] | None = None,
        cancel_client_order_id: str = "",
    ) -> None:
        """Record one sequence bump with the book's levels as the change leaves them."""
        levels = sorted(
            {(side, price) for side, price in prices if price is not None}, key=lambda level: (str(level[0]), level[1])
        )
        self.plan.changes.append(
            BookChange(
                offset=len(self.plan.changes) + 1,
                taker_order_id=taker_order_id,
                orders=orders,
                levels=[(side, price, self.book.level_qty(side, price)) for side, price in levels],
                bid=self.book.best(Side.BUY),
                ask=self.book.best(Side.SELL),
                trades=trades or [],
                cancel_client_order_id=cancel_client_order_id,
            )
        )

    # -- cancel -----------------------------------------------------------------------------------------

    def cancel(self, command: Cancel) -> int:
        """Plan one cancel: the whole remaining hold released; returns the order id.

        Raises :class:`NotFound` (no such order, or another user's), :class:`InvalidState`
        (already ended), :class:`Unplannable` (see there).
        """
        order_id = command.order_id
        maker = self.book.get(order_id)
        status: str
        if maker is not None:
            owner, status = maker.user_id, OrderStatus.OPEN
        elif order_id in self.plan.placed:
            owner, status = self.plan.placed[order_id].user_id, self.plan.placed[order_id].status
        elif order_id in self.left:  # it was resting when the batch began
            owner, status = self.left[order_id], self.plan.updated[order_id].status
        elif order_id in self.known:
            known = self.known[order_id]
            if known.market_id != self.market.id:
                raise Unplannable(f"order {order_id} is not of market {self.market.symbol}")
            owner, status = known.user_id, known.status
            if status in OPEN_STATUSES:
                raise Unplannable(f"open order {order_id} is not in the book")
        else:
            raise NotFound(f"No order {order_id}.", fields={"order": "No such order."})
        if command.user_id is not None and owner != command.user_id:
            raise NotFound(f"No order {order_id}.", fields={"order": "No such order."})
        if maker is None:
            message = f"Order {order_id} is {status}: it can no longer be cancelled."
            raise InvalidState(message, fields={"order": message})
        status = OrderStatus.PARTIALLY_FILLED if maker.filled_qty else OrderStatus.OPEN
        if command.only_status and status != command.only_status:
            raise CancelRestricted(order_id, status)
        self.book.remove(order_id)
        self.left[order_id] = maker.user_id
        release = maker.held_remaining
        maker.held_remaining = Decimal(0)
        state = OrderState(
            maker.filled_qty,
            maker.filled_quote_qty,
            maker.fee_total,
            Decimal(0),
            OrderStatus.CANCELLED,
            EndReason.CANCELLED_BY_OPERATOR if command.by_operator else EndReason.CANCELLED,
        )
        self._record(order_id, state)
        asset = self.market.quote_id if maker.side == Side.BUY else self.market.base_id
        if release:
            self.plan.entries.append(Release(order_id, maker.user_id, asset, release))
            self._credit(maker.user_id, asset, release)
        self._change(
            taker_order_id=None,
            orders={order_id: state},
            prices=[(maker.side, maker.price)],
            cancel_client_order_id=command.cancel_client_order_id,
        )
        return order_id

    def cancel_by_client_id(self, command: CancelByClientId) -> int:
        """Plan the cancel of the order named by its ``client_order_id`` (placed in this batch, or stored before it:
        ``existing``); as :meth:`cancel` from there. Raises :class:`NotFound` when the user has no such order on
        this market."""
        key = (command.user_id, command.client_order_id)
        placed = self.by_client_id.get(key)
        if placed is not None:
            order_id = placed.id
        elif key in self.existing and self.existing[key].market_id == self.market.id:
            stored = self.existing[key]
            self.known.setdefault(stored.id, stored)  # its market and state as stored, when it is not in the book
            order_id = stored.id
        else:
            raise NotFound(
                f"No order with client_order_id {command.client_order_id!r}.", fields={"order": "No such order."}
            )
        return self.cancel(
            Cancel(order_id, command.user_id, command.by_operator, command.cancel_client_order_id, command.only_status)
        )

    def cancel_all(self, command: CancelAll) -> list[int]:
        """Plan the cancel of every order ``command.user_id`` has resting in the book now, oldest first (each
        its own cancel and sequence bump, as :meth:`cancel`); returns their ids (none: nothing is written)."""
        ids = sorted(order_id for order_id, maker in self.book.orders.items() if maker.user_id == command.user_id)
        return [self.cancel(Cancel(order_id, command.user_id, command.by_operator)) for order_id in ids]
