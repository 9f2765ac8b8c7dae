"""Settlement planning of one placement: what is held, each fill's fees, the taker's outcome and the
resting orders' new state. Pure (:mod:`apps.orders.engine`): the caller writes what this decides.

Amounts are ``Decimal`` in the units of :mod:`apps.orders.engine.matching`; fees are in the asset
each side receives (the buyer pays in base, the seller in quote), rounded up (:func:`fee_for`).
"""

from dataclasses import dataclass
from decimal import Decimal, localcontext

from .matching import EXACT, Fill, Maker, MatchPlan, Stop, fee_for
from .vocabulary import OPEN_STATUSES, EndReason, OrderStatus, OrderType, Side, TimeInForce


@dataclass
class Settlement:
    """A planned fill with its number (from 1, in matching order) and fees.

    ``trade_id`` (``<taker order id>-<seq>``) is set once the taker's id is known,
    ``entry_id`` once its journal entry is posted.
    """

    fill: Fill
    seq: int
    taker_fee: Decimal
    maker_fee: Decimal
    trade_id: str = ""
    entry_id: int = 0


def settlements_plan(
    *, taker_side: str, taker_rate: Decimal, plan: MatchPlan, base_decimals: int, quote_decimals: int
) -> list[Settlement]:
    """Number the plan's fills from 1 and price their fees: ``received * rate`` rounded up to the
    received asset's precision (the taker at ``taker_rate``, each maker at its own ``fee_rate``)."""
    settlements = []
    for seq, fill in enumerate(plan.fills, start=1):
        if taker_side == Side.BUY:
            taker_fee = fee_for(fill.qty, taker_rate, base_decimals)
            maker_fee = fee_for(fill.quote_qty, fill.maker.fee_rate, quote_decimals)
        else:
            taker_fee = fee_for(fill.quote_qty, taker_rate, quote_decimals)
            maker_fee = fee_for(fill.qty, fill.maker.fee_rate, base_decimals)
        settlements.append(Settlement(fill, seq, taker_fee, maker_fee))
    return settlements


def hold_plan(
    *, side: str, price: Decimal | None, qty: Decimal | None, quote_qty: Decimal | None, plan: MatchPlan
) -> tuple[Decimal, Decimal]:
    """``(held_amount, held_left)`` of the taker: what it holds at placement and what its fills leave.

    A sell holds ``qty`` base; a market buy by budget the budget; a limit buy ``qty * price``
    quote; a market buy by base quantity the exact cost of its fills. Exact arithmetic
    (:data:`EXACT`); raises ``AssertionError`` if the fills consumed more than the hold.
    """
    buy = side == Side.BUY
    with localcontext(EXACT):
        if buy and quote_qty is not None:
            held_amount = quote_qty
        elif buy and price is None:
            held_amount = plan.filled_quote_qty
        elif qty is None:
            raise ValueError("a sell or a limit buy needs a quantity")
        elif buy and price is not None:
            held_amount = qty * price
        else:
            held_amount = qty
        held_left = held_amount - (plan.filled_quote_qty if buy else plan.filled_qty)
    if held_left < 0:
        raise AssertionError(f"the fills consume more than the hold {held_amount}")
    return held_amount, held_left


def outcome(*, type: str, time_in_force: str, plan: MatchPlan) -> tuple[str, str]:
    """The taker's ``(status, end reason)`` once the plan has run; ``open``/``partially_filled`` rest."""
    filled = plan.filled_qty
    if plan.stop is Stop.FILLED:
        return OrderStatus.FILLED, EndReason.NONE
    if plan.stop is Stop.SELF_TRADE:
        return OrderStatus.EXPIRED, EndReason.SELF_TRADE_PREVENTION
    if type == OrderType.LIMIT and time_in_force == TimeInForce.GTC:
        return (OrderStatus.PARTIALLY_FILLED if filled else OrderStatus.OPEN), EndReason.NONE
    if plan.stop is Stop.BUDGET and filled:
        return OrderStatus.FILLED, EndReason.NONE  # what is left cannot buy one more step
    if type == OrderType.MARKET and plan.stop is Stop.BOOK:
        return OrderStatus.EXPIRED, EndReason.NO_LIQUIDITY
    if plan.stop is Stop.PRICE_BAND:
        return OrderStatus.EXPIRED, EndReason.PRICE_PROTECTION
    return OrderStatus.EXPIRED, EndReason.UNFILLED_REMAINDER


@dataclass(frozen=True)
class MakerUpdate:
    """A resting order's new state after a placement; ``release`` is what its end returns (0 if it rests)."""

    maker: Maker
    status: str
    reason: str
    release: Decimal


def maker_updates(*, taker_side: str, settlements: list[Settlement], expired: list[Maker]) -> list[MakerUpdate]:
    """Apply the fills and self-trade expiries to the resting orders (their :class:`Maker` values change).

    Each fill adds its quantity, value and maker fee and consumes from the hold what it
    cost (quote for a bid, base for an ask); a maker that ends (filled, or expired by
    self-trade prevention) releases all it still holds and is left holding nothing.
    Raises ``AssertionError`` if a fill consumed more than a hold.
    """
    makers_buy = taker_side == Side.SELL
    updates: list[tuple[Maker, str, str]] = []
    status: str
    with localcontext(EXACT):
        for s in settlements:
            maker = s.fill.maker
            maker.filled_qty += s.fill.qty
            maker.filled_quote_qty += s.fill.quote_qty
            maker.fee_total += s.maker_fee
            maker.held_remaining -= s.fill.quote_qty if makers_buy else s.fill.qty
            if maker.held_remaining < 0:
                raise AssertionError(f"order {maker.id}: a fill consumes more than its hold")
            status = OrderStatus.FILLED if maker.remaining == 0 else OrderStatus.PARTIALLY_FILLED
            updates.append((maker, status, EndReason.NONE))
    updates += [(maker, OrderStatus.EXPIRED, EndReason.SELF_TRADE_PREVENTION) for maker in expired]
    result = []
    for maker, status, reason in updates:
        release = Decimal(0)
        if status not in OPEN_STATUSES:
            release, maker.held_remaining = maker.held_remaining, Decimal(0)
        result.append(MakerUpdate(maker, status, reason, release))
    return result
