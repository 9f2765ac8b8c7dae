"""Order rejections, each with the stable code of API.md and the offending field in ``fields``.

A rejection is synchronous and leaves nothing behind: no order row, nothing held.
"""

from apps.core.errors import DomainError, InvalidState


class OrderRejected(DomainError):
    """Base of the order rejections: ``field`` names the input at fault."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message, fields={field: message})
        self.field = field


class InvalidPrice(OrderRejected):
    """The price is missing, not positive, finer than the asset precision or off the market's tick."""

    code = "invalid_price"


class InvalidQuantity(OrderRejected):
    """A quantity (``qty`` or ``quote_qty``) off the step, below ``min_qty``, above ``max_qty`` or malformed."""

    code = "invalid_quantity"


class MinNotional(OrderRejected):
    """The order's quote value is below the market's ``min_notional``."""

    code = "min_notional"


class MaxNotional(OrderRejected):
    """A limit order's quote value (``qty * price``) is above the largest amount the ledger can hold of the quote
    asset (:func:`apps.orders.services.parsing.max_notional`, exchangeInfo's ``maxNotional``)."""

    code = "max_notional"


class MarketHalted(OrderRejected):
    """The market is halted: no order is accepted until an operator resumes it (cancels still are)."""

    code = "market_halted"
    status = 409


class PostOnlyWouldTake(OrderRejected):
    """A post-only order would match a resting order on arrival."""

    code = "post_only_would_take"


class FokNotFillable(OrderRejected):
    """A fill-or-kill order cannot be filled completely right now."""

    code = "fok_not_fillable"


class NoFeeSchedule(DomainError):
    """No default fee schedule exists, so no fee can be computed: trading waits for an operator (HTTP 503)."""

    code = "unavailable"
    status = 503


class InvalidFeeRate(DomainError):
    """A fee rate that is not a plain decimal fraction from 0 to ``settings.FEE_RATE_MAX`` with at most 8 places."""

    code = "invalid_fee_rate"

    def __init__(self, message: str, *, field: str):
        super().__init__(message, fields={field: message})


class CancelRestricted(InvalidState):
    """A cancel restricted to one status (``only_status``: Binance's ``cancelRestrictions``) found the order open in
    another (409): an ``open`` order has filled meanwhile, or a ``partially_filled`` one has not. Nothing changed."""

    code = "cancel_restricted"

    def __init__(self, order_id: int, status: str):
        message = f"Order {order_id} is {status}: the cancel was restricted to another status."
        super().__init__(message, fields={"order": message})


class OrderStatusUnknown(DomainError):
    """The order was handed to its market's sequencer, but no outcome arrived within
    ``settings.ORDERS_ENGINE_WAIT_SECONDS`` (HTTP 504): it may still be placed. Query the
    order (by ``client_order_id``) or retry with the same ``client_order_id`` or
    ``Idempotency-Key``, which returns the original order; never assume it failed."""

    code = "order_status_unknown"
    status = 504
