"""Parsing an order request and checking it against the market's filters (before and under the lock).

Amounts are refused, never rounded, when finer than the asset's precision (DESIGN.md
section 2); each error names its field with a stable code (:mod:`apps.orders.errors`).
"""

from decimal import Decimal, localcontext

from apps.core.errors import DomainError
from apps.ledger.amounts import AMOUNT_LIMIT, format_amount, parse_amount
from apps.ledger.errors import InvalidAmount

from ..engine.batch import Request
from ..engine.matching import EXACT, WIDE, MatchPlan
from ..errors import InvalidPrice, InvalidQuantity, MaxNotional, MinNotional, OrderRejected
from ..models import OrderType, SelfTradePrevention, Side, TimeInForce
from ..store.markets import LockedMarket, MarketShape


def value_parse(raw, *, decimals: int, field: str, error: type[DomainError], allow_zero: bool = False) -> Decimal:
    """:func:`parse_amount`, raising ``error`` (with the field) instead of ``InvalidAmount``."""
    try:
        with localcontext(WIDE):  # NUMERIC(38, 18) needs more than the default 28 digits
            return parse_amount(raw, decimals=decimals, field=field, allow_zero=allow_zero)
    except InvalidAmount as exc:
        if issubclass(error, OrderRejected):
            raise error(exc.message, field=field) from None
        raise error(exc.message, fields={field: exc.message}) from None


_CHOICE_MEMBERS = {
    choices: {member.value: member for member in choices}
    for choices in (Side, OrderType, TimeInForce, SelfTradePrevention)
}
"""Each choice's members by value: a dict lookup, where ``choices(value)`` goes through the enum's metaclass."""


def choice(value, choices, field: str, default=None) -> str:
    """``value`` if it is one of ``choices`` (``default`` for ``None``), else a DomainError naming ``field``."""
    if value is None and default is not None:
        return default
    member = _CHOICE_MEMBERS[choices].get(value) if isinstance(value, str) else None
    if member is None:
        message = f"Must be one of {', '.join(choices.values)}."
        raise DomainError(message, fields={field: message})
    return member


def request_parse(
    market: MarketShape | LockedMarket,
    *,
    user_id: int,
    side,
    type,
    price,
    qty,
    quote_qty,
    time_in_force,
    post_only,
    stp,
    client_order_id,
) -> Request:
    """Parse the inputs and check them against the market's tick, step and precisions.

    Raises :class:`DomainError` (code ``invalid_request``) for a malformed choice,
    :class:`InvalidPrice`, :class:`InvalidQuantity`. The quantity limits are checked under
    the lock (:func:`limits_check`), ``min_notional`` once a market order's reference
    price is known.
    """
    side = choice(side, Side, "side")
    type = choice(type, OrderType, "type")
    stp = choice(stp, SelfTradePrevention, "stp", default=SelfTradePrevention.EXPIRE_TAKER)
    time_in_force = choice(
        time_in_force,
        TimeInForce,
        "time_in_force",
        default=TimeInForce.GTC if type == OrderType.LIMIT else TimeInForce.IOC,
    )
    if not isinstance(post_only, bool):
        raise DomainError("Must be true or false.", fields={"post_only": "Must be true or false."})
    if not isinstance(client_order_id, str) or len(client_order_id) > 64:
        raise DomainError("At most 64 characters.", fields={"client_order_id": "At most 64 characters."})
    if not client_order_id.isprintable():  # the API's rule, for every caller (the web form's hidden field too)
        message = "Only printable characters (no controls, tabs or line breaks)."
        raise DomainError(message, fields={"client_order_id": message})

    if type == OrderType.LIMIT:
        if price is None:
            raise InvalidPrice("A limit order needs a price.", field="price")
        if qty is None:
            raise InvalidQuantity("A limit order needs a quantity.", field="qty")
        if quote_qty is not None:
            raise InvalidQuantity("Only a market buy takes a quote quantity.", field="quote_qty")
        price = value_parse(price, decimals=market.quote_decimals, field="price", error=InvalidPrice)
        if price % market.tick_size:
            raise InvalidPrice(f"Must be a multiple of the tick size {market.tick_size.normalize():f}.", field="price")
    else:
        if price is not None:
            raise InvalidPrice("A market order takes no price.", field="price")
        if post_only:
            raise DomainError("Only a limit order can be post-only.", fields={"post_only": "Only for limit orders."})
        if time_in_force == TimeInForce.GTC:
            message = "A market order is immediate: IOC or FOK."
            raise DomainError(message, fields={"time_in_force": message})
        if (qty is None) == (quote_qty is None):
            field = "qty" if side == Side.SELL or qty is not None else "quote_qty"
            message = "A market buy takes either qty or quote_qty." if side == Side.BUY else "A market sell takes qty."
            raise InvalidQuantity(message, field=field)
        if quote_qty is not None and side == Side.SELL:
            raise InvalidQuantity("A market sell takes qty.", field="quote_qty")
    if post_only and time_in_force != TimeInForce.GTC:
        raise DomainError("A post-only order rests: GTC.", fields={"time_in_force": "Must be GTC when post-only."})

    if qty is not None:
        qty = value_parse(qty, decimals=market.base_decimals, field="qty", error=InvalidQuantity)
        if qty % market.step_size:
            raise InvalidQuantity(f"Must be a multiple of the step size {market.step_size.normalize():f}.", field="qty")
    if quote_qty is not None:
        quote_qty = value_parse(quote_qty, decimals=market.quote_decimals, field="quote_qty", error=InvalidQuantity)
    return Request(user_id, side, type, price, qty, quote_qty, time_in_force, post_only, stp, client_order_id)


def limits_check(market: LockedMarket, request: Request) -> None:
    """The quantity within the market's ``min_qty``..``max_qty`` (as locked: operators change them)."""
    if request.qty is not None and request.qty < market.min_qty:
        raise InvalidQuantity(f"Must be at least {market.min_qty.normalize():f}.", field="qty")
    if request.qty is not None and request.qty > market.max_qty:
        raise InvalidQuantity(f"Must be at most {market.max_qty.normalize():f}.", field="qty")


def max_notional(quote_decimals: int) -> Decimal:
    """The largest value in quote a limit order may have: the largest amount of the quote asset the ledger holds
    (one quantum below 10^20, :data:`apps.ledger.amounts.AMOUNT_LIMIT`); exchangeInfo's ``maxNotional``."""
    return AMOUNT_LIMIT - Decimal(1).scaleb(-quote_decimals)


def notional_check(market: LockedMarket, request: Request, plan: MatchPlan) -> None:
    """The order's value in quote must reach ``min_notional`` (:class:`MinNotional`) and, for a limit order, stay
    within :func:`max_notional` (:class:`MaxNotional`: a sell above it rested where no buyer could ever pay it).

    Limit: ``qty * price``. Market buy by budget: the budget. Market by base quantity:
    ``qty`` at the best resting price met (no check on an empty book: nothing fills).
    Binance's NOTIONAL filter, ``applyMinToMarket`` true and ``applyMaxToMarket`` false.
    """
    if request.quote_qty is not None:
        value, field = request.quote_qty, "quote_qty"
    elif request.qty is None:  # request_parse gives every order a qty or a quote_qty
        raise ValueError("an order request with neither qty nor quote_qty")
    elif request.price is not None:
        value, field = EXACT.multiply(request.qty, request.price), "qty"
    elif plan.first_price is not None:
        value, field = EXACT.multiply(request.qty, plan.first_price), "qty"
    else:
        return
    largest = max_notional(market.quote_decimals)
    if request.price is not None and value > largest:
        raise MaxNotional(
            f"Order value {format_amount(value, market.quote_decimals)} {market.quote_code} is above the maximum "
            f"{format_amount(largest, market.quote_decimals)}.",
            field=field,
        )
    if value < market.min_notional:
        raise MinNotional(
            f"Order value {format_amount(value, market.quote_decimals)} {market.quote_code} is below the minimum "
            f"{format_amount(market.min_notional, market.quote_decimals)}.",
            field=field,
        )
