"""What the market page says once an order is placed: what filled, at what average price, and what became
of the rest (resting in the book, or released and why).

``Sold 0.1235 BTC at 59,550.00 USDT average; 0.8765 BTC not filled: no more bids.``
"""

from apps.ledger.amounts import format_display
from apps.orders.models import EndReason, Market, Order, OrderStatus, Side, decimals_of

# Why an order's remainder was not filled, in the page's words (the end reasons of apps.orders.models).
_NOT_FILLED_BECAUSE: dict[str, str] = {
    EndReason.UNFILLED_REMAINDER: "immediate or cancel",
    EndReason.SELF_TRADE_PREVENTION: "it would have traded with your own order",
}


def _base(market: Market, value) -> str:
    return f"{format_display(value, market.base.display_places)} {market.base.code}"


def _quote(market: Market, value) -> str:
    return f"{format_display(value, market.quote.display_places)} {market.quote.code}"


def _price(market: Market, value) -> str:
    return f"{format_display(value, decimals_of(market.tick_size), trim=False)} {market.quote.code}"


def _why(order: Order) -> str:
    """Why the remainder of an ended order was not filled."""
    if order.reject_reason == EndReason.NO_LIQUIDITY:
        return f"no more {'asks' if order.side == Side.BUY else 'bids'}"
    return _NOT_FILLED_BECAUSE.get(order.reject_reason, order.get_reject_reason_display().lower())


def _remainder(order: Order, market: Market) -> str:
    """What became of the part that did not fill ("" when nothing is left)."""
    if order.status in (OrderStatus.OPEN, OrderStatus.PARTIALLY_FILLED):
        return f"{_base(market, order.remaining_qty)} rests in the book at {_price(market, order.price)}"
    if order.qty is not None:
        left = order.remaining_qty
        return f"{_base(market, left)} not filled: {_why(order)}" if left else ""
    assert order.quote_qty is not None  # a market buy by quote budget: no qty, a quote_qty
    left = order.quote_qty - order.filled_quote_qty
    if not left:
        return ""
    if order.status == OrderStatus.FILLED:
        return f"{_quote(market, left)} left over (less than one more step) released"
    return f"{_quote(market, left)} not spent: {_why(order)}"


def order_placed_message(order: Order, market: Market) -> str:
    """The result of a placement in words: ``"Order #7: bought 0.2 BTC at 59,900.00 USDT average; 0.3 BTC rests
    in the book at 60,000.00 USDT."`` Amounts at the assets' display precision, prices at the market's tick."""
    if order.filled_qty:
        verb = "bought" if order.side == Side.BUY else "sold"
        done = f"{verb} {_base(market, order.filled_qty)} at {_price(market, order.average_price)} average"
    else:
        done = f"{order.get_side_display().lower()} {order.get_type_display().lower()}, nothing filled"
    rest = _remainder(order, market)
    return f"Order #{order.id}: {done}{'; ' + rest if rest else ''}."
