"""The matching engine's arithmetic: price-time priority, fills at the maker's price, fees.

Pure functions, no database: :func:`plan_match` walks the resting orders it is given
(best price first, oldest first within a price) and returns every fill and every
self-trade prevention action *before* anything is written, so fill-or-kill, post-only
and a market buy by base quantity (whose hold is the exact cost of its fills) are
decided first. :mod:`apps.orders.services` loads the book under the market lock and
carries the plan out; since nothing else can touch the book while the lock is held,
the plan is exactly what happens. No database here (:mod:`apps.orders.engine`).

Amounts are ``Decimal``: prices in quote per base, quantities in base, values in quote.
Every ``qty * price`` is exact (the market precision rule); :data:`EXACT` traps any
rounding so a broken rule fails loudly instead of losing a unit.
"""

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import (
    ROUND_CEILING,
    Context,
    Decimal,
    DivisionByZero,
    Inexact,
    InvalidOperation,
    Overflow,
    Rounded,
    localcontext,
)

from .vocabulary import SelfTradePrevention, Side

# Wide enough for NUMERIC(38, 18) times NUMERIC(38, 18); any rounding is an error.
EXACT = Context(prec=80, traps=[InvalidOperation, DivisionByZero, Overflow, Inexact, Rounded])
# For fees: wide, rounding allowed (the quantize below decides the direction).
WIDE = Context(prec=80, traps=[InvalidOperation, DivisionByZero, Overflow])


def fee_for(amount: Decimal, rate: Decimal, decimals: int) -> Decimal:
    """``amount * rate`` rounded UP to ``10 ** -decimals`` (in the exchange's favour).

    ``amount`` is what a side receives (base for the buyer, quote for the seller),
    ``rate`` a fraction (``0.001`` = 0.1 %). A positive rate on a positive amount never
    gives a zero fee; the fee never exceeds ``amount`` when ``rate < 1`` and ``amount``
    is itself a multiple of the precision.
    """
    with localcontext(WIDE):
        return (amount * rate).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_CEILING)


@dataclass
class Maker:
    """A resting order as loaded under the market lock; ``fee_rate`` is its owner's maker rate.

    ``qty``/``filled_qty`` in base, ``filled_quote_qty`` in quote, ``fee_total`` in the
    asset it receives, ``held_remaining`` in the asset it holds (quote for a bid, base
    for an ask).
    """

    id: int
    user_id: int
    side: str
    price: Decimal
    qty: Decimal
    filled_qty: Decimal
    filled_quote_qty: Decimal
    fee_total: Decimal
    held_remaining: Decimal
    fee_rate: Decimal

    @property
    def remaining(self) -> Decimal:
        """Base quantity still resting."""
        return self.qty - self.filled_qty


@dataclass(frozen=True)
class Taker:
    """The incoming order: ``price`` is the limit (``None`` for a market order).

    Exactly one of ``qty`` (base) and ``quote_qty`` (quote budget, market buys only) is set.
    """

    user_id: int
    side: str
    price: Decimal | None
    qty: Decimal | None
    quote_qty: Decimal | None
    stp: str = SelfTradePrevention.EXPIRE_TAKER

    def crosses(self, maker_price: Decimal) -> bool:
        """Whether a resting order at ``maker_price`` is marketable for this taker."""
        if self.price is None:
            return True
        return maker_price <= self.price if self.side == Side.BUY else maker_price >= self.price


@dataclass(frozen=True)
class Fill:
    """One match: ``qty`` base at the maker's ``price``; ``quote_qty = qty * price`` exactly."""

    maker: Maker
    qty: Decimal
    price: Decimal
    quote_qty: Decimal


class Stop(enum.Enum):
    """Why matching stopped."""

    FILLED = "filled"  # the taker's quantity (or whole budget) is filled
    BUDGET = "budget"  # the rest of a quote budget cannot buy one more step at the next price
    BOOK = "book"  # no (more) resting order crosses the taker's price
    PRICE_BAND = "price_band"  # the next resting order is beyond the market order's price protection
    SELF_TRADE = "self_trade"  # self-trade prevention expired the taker


@dataclass
class MatchPlan:
    """What a placement will do: fills in execution order, makers expired by self-trade prevention."""

    fills: list[Fill] = field(default_factory=list)
    expired_makers: list[Maker] = field(default_factory=list)
    stop: Stop = Stop.BOOK
    first_price: Decimal | None = None  # price of the best crossing resting order met, if any

    @property
    def filled_qty(self) -> Decimal:
        return sum((fill.qty for fill in self.fills), Decimal(0))

    @property
    def filled_quote_qty(self) -> Decimal:
        return sum((fill.quote_qty for fill in self.fills), Decimal(0))


def band_limit(best: Decimal, side: str, percent: Decimal) -> Decimal:
    """The furthest price a market order may reach from the ``best`` price it meets: ``percent`` above it for a buy,
    below it for a sell (Binance's ``PERCENT_PRICE_BY_SIDE`` idea, measured from the best price)."""
    with localcontext(WIDE):
        factor = percent / 100
        return best * (1 + factor) if side == Side.BUY else best * (1 - factor)


def plan_match(
    taker: Taker, makers: Iterable[Maker], *, step_size: Decimal, price_band: Decimal | None = None
) -> MatchPlan:
    """Match ``taker`` against ``makers`` (best first) by price-time priority; write nothing.

    ``price_band`` (a percentage, market orders only): no fill beyond :func:`band_limit` of the first
    resting order met; matching stops there with :attr:`Stop.PRICE_BAND`.

    A fill takes ``min(taker remaining, maker remaining)`` at the maker's price; a quote
    budget buys whole steps only (``floor(budget left / (price * step)) * step``). When
    the resting order belongs to the taker's own user, self-trade prevention applies the
    taker's mode: ``expire_taker`` stops matching, ``expire_maker`` expires the resting
    order and goes on, ``expire_both`` does both; no fill, no fee. ``makers`` is consumed
    lazily: no resting order beyond the last one needed is requested.
    """
    plan = MatchPlan()
    limit: Decimal | None = None
    left_qty = taker.qty
    left_budget = taker.quote_qty
    with localcontext(EXACT):
        iterator = iter(makers)
        while True:
            if left_qty is not None and left_qty == 0 or left_budget is not None and left_budget == 0:
                plan.stop = Stop.FILLED
                break
            maker = next(iterator, None)
            if maker is None or not taker.crosses(maker.price):
                plan.stop = Stop.BOOK
                break
            if plan.first_price is None:
                plan.first_price = maker.price
                limit = None if price_band is None else band_limit(maker.price, taker.side, price_band)
            if limit is not None and (maker.price > limit if taker.side == Side.BUY else maker.price < limit):
                plan.stop = Stop.PRICE_BAND
                break
            if maker.user_id == taker.user_id:
                if taker.stp in (SelfTradePrevention.EXPIRE_MAKER, SelfTradePrevention.EXPIRE_BOTH):
                    plan.expired_makers.append(maker)
                if taker.stp in (SelfTradePrevention.EXPIRE_TAKER, SelfTradePrevention.EXPIRE_BOTH):
                    plan.stop = Stop.SELF_TRADE
                    break
                continue
            if left_qty is not None:
                qty = min(left_qty, maker.remaining)
            else:
                assert left_budget is not None  # a taker gives a quantity or a quote budget (Taker)
                affordable = (left_budget // (maker.price * step_size)) * step_size
                qty = min(affordable, maker.remaining)
                if qty == 0:
                    plan.stop = Stop.BUDGET
                    break
            quote_qty = qty * maker.price
            plan.fills.append(Fill(maker=maker, qty=qty, price=maker.price, quote_qty=quote_qty))
            if left_qty is not None:
                left_qty -= qty
            else:
                assert left_budget is not None
                left_budget -= quote_qty
                if qty < maker.remaining and left_budget:
                    plan.stop = Stop.BUDGET  # not one more step at this price, and the next are dearer
                    break
    return plan
