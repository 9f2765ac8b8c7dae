"""The demo's liquidity bot: two ordinary users trading through the order services.

``maker`` keeps, on each market, a ladder of bids and asks around a reference price
that moves at random; ladder prices sit on a grid (half a per-mille of the starting
price, a multiple of the tick) so small moves leave most orders in place. ``taker``
sometimes sends a small market order, so the book trades and the trade history moves.
Both were funded by deposits; they hold and pay like anyone else (self-trade prevention
would stop one user from trading with itself, hence two users).
"""

import logging
import math
import random
import time
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

from apps.core.errors import DomainError
from apps.orders.errors import OrderStatusUnknown
from apps.orders.models import Market, MarketStatus
from apps.orders.selectors import orders_for_user, recent_trades
from apps.orders.services import open_orders_cancel, order_cancel, order_place

log = logging.getLogger(__name__)

# Where a market's reference price starts when it has never traded (quote per base).
STARTING_PRICES = {"BTC-USDT": Decimal("60000"), "ETH-USDT": Decimal("3000"), "ETH-BTC": Decimal("0.05")}
GRID = Decimal("0.0005")  # ladder spacing, a share of the starting price
VOLATILITY = 0.0008  # standard deviation of one step's relative price move


def _round(value: Decimal, unit: Decimal, rounding: str) -> Decimal:
    return (value / unit).to_integral_value(rounding=rounding) * unit


@dataclass
class MarketState:
    market: Market
    reference: Decimal
    grid: Decimal


@dataclass
class StepReport:
    """What one step did, per kind of action (for the log and the tests)."""

    placed: int = 0
    cancelled: int = 0
    taken: int = 0
    refused: list[str] = field(default_factory=list)


class MarketMaker:
    """Quotes ``levels`` bids and asks per market for ``maker_id``; ``taker_id`` takes liquidity with ``take_chance``.

    Prices are in each market's quote asset per base unit, sizes a random multiple of the
    market's ``min_notional`` (100 to 600 times). Refusals by the order services (for
    example ``insufficient_funds`` before the funding deposits are credited) are logged
    and retried on the next step.
    """

    def __init__(
        self,
        *,
        maker_id: int,
        taker_id: int,
        markets: list[Market],
        levels: int = 5,
        take_chance: float = 0.3,
        rng: random.Random | None = None,
    ):
        self.maker_id = maker_id
        self.taker_id = taker_id
        self.levels = levels
        self.take_chance = take_chance
        self.rng = rng or random.Random()
        self.states = [state for state in map(self._start, markets) if state is not None]

    def _start(self, market: Market) -> MarketState | None:
        last = recent_trades(market=market.symbol, limit=1)
        reference = last[0].price if last else STARTING_PRICES.get(market.symbol)
        if reference is None:
            log.warning("market_maker.skip market=%s reason=no_starting_price", market.symbol)
            return None
        grid = max(_round(reference * GRID, market.tick_size, ROUND_FLOOR), market.tick_size)
        return MarketState(market=market, reference=reference, grid=grid)

    def step(self) -> StepReport:
        """Move every reference price, re-quote the ladders, maybe take liquidity."""
        report = StepReport()
        for state in self.states:
            state.market.refresh_from_db(fields=["status"])
            if state.market.status != MarketStatus.ACTIVE:
                continue
            state.reference *= Decimal(math.exp(self.rng.gauss(0, VOLATILITY)))
            self._requote(state, report)
            if self.rng.random() < self.take_chance:
                self._take(state, report)
        return report

    def cancel_all(self, *, wait_seconds: float | None = None) -> tuple[int, list[str]]:
        """Cancel every open order of the maker on its markets (on shutdown, one command per market): how many were
        cancelled, and the markets whose cancel is queued but not answered within ``wait_seconds`` in all (their
        sequencer is stopped too, say: it applies the cancel when it runs again). ``None``: the usual wait each."""
        deadline = None if wait_seconds is None else time.monotonic() + wait_seconds
        cancelled, queued = 0, []
        for state in self.states:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                cancelled += len(
                    open_orders_cancel(user_id=self.maker_id, market=state.market.symbol, wait_seconds=left)
                )
            except OrderStatusUnknown:
                queued.append(state.market.symbol)
        return cancelled, queued

    def _ladder(self, state: MarketState) -> dict[str, set[Decimal]]:
        center_bid = _round(state.reference, state.grid, ROUND_FLOOR)
        center_ask = _round(state.reference, state.grid, ROUND_CEILING)
        if center_ask == center_bid:
            center_ask += state.grid
        return {
            "buy": {center_bid - i * state.grid for i in range(self.levels) if center_bid - i * state.grid > 0},
            "sell": {center_ask + i * state.grid for i in range(self.levels)},
        }

    def _size(self, market: Market, price: Decimal) -> Decimal:
        notional = market.min_notional * self.rng.randint(100, 600) if market.min_notional else price
        qty = _round(notional / price, market.step_size, ROUND_FLOOR)
        return min(max(qty, market.min_qty), market.max_qty)

    def _requote(self, state: MarketState, report: StepReport) -> None:
        market = state.market
        wanted = self._ladder(state)
        for order in orders_for_user(user_id=self.maker_id, market=market.symbol, status="open"):
            if order.price in wanted[order.side]:
                wanted[order.side].discard(order.price)
                continue
            try:
                order_cancel(order_id=order.id, user_id=self.maker_id)
                report.cancelled += 1
            except DomainError:
                pass  # filled or cancelled meanwhile
        for side, prices in wanted.items():
            for price in sorted(prices):
                try:
                    order_place(
                        user_id=self.maker_id,
                        market=market.symbol,
                        side=side,
                        type="limit",
                        price=price,
                        qty=self._size(market, price),
                        time_in_force="GTC",
                        post_only=True,
                    )
                    report.placed += 1
                except DomainError as error:
                    report.refused.append(f"{market.symbol} {side} {price}: {error.code}")

    def _take(self, state: MarketState, report: StepReport) -> None:
        market = state.market
        side = self.rng.choice(["buy", "sell"])
        try:
            if side == "buy":
                budget = _round(market.min_notional * self.rng.randint(20, 100), market.quote.quantum, ROUND_FLOOR)
                order_place(user_id=self.taker_id, market=market.symbol, side="buy", type="market", quote_qty=budget)
            else:
                qty = max(
                    _round(self._size(market, state.reference) / 4, market.step_size, ROUND_FLOOR), market.min_qty
                )
                order_place(user_id=self.taker_id, market=market.symbol, side="sell", type="market", qty=qty)
            report.taken += 1
        except DomainError as error:
            report.refused.append(f"{market.symbol} take {side}: {error.code}")
