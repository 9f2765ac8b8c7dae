"""Signed endpoints of ``/api/v3/`` (Binance's "Trading endpoints" and "Account endpoints").

Parameters are translated into our services' arguments and their answers into Binance's JSON;
nothing here writes: placement is :func:`apps.orders.services.order_place`, cancellation
:func:`apps.orders.services.order_cancel` and :func:`~apps.orders.services.open_orders_cancel` (each one
transaction holding the market lock).

Translation (Binance -> ours): ``LIMIT`` + ``timeInForce`` GTC/IOC/FOK is a limit order with that
time in force; ``LIMIT_MAKER`` a post-only GTC limit order; ``MARKET`` with ``quantity`` a market
order for a base quantity (IOC), with ``quoteOrderQty`` a market buy with a quote budget (a
market sell by quote amount is not supported: -1014). ``selfTradePreventionMode`` EXPIRE_TAKER,
EXPIRE_MAKER, EXPIRE_BOTH map to ours; NONE, DECREMENT and TRANSFER are refused (-2010: self-trades
are always prevented here). Without ``newClientOrderId`` a random one is drawn, as Binance does.
``strategyId`` and ``strategyType`` (a bot's tags of its orders) are checked as Binance checks them and otherwise
ignored: nothing keeps them, so no answer carries them back (break-it review: a bot tagging its orders had every
one refused, -1104).
"""

import re
import secrets
from collections.abc import Callable
from functools import partial

from apps.accounts.second_factor import user_has_second_factor
from apps.accounts.selectors import account_restriction
from apps.core.errors import DomainError
from apps.ledger.selectors import balances_for_user
from apps.orders.errors import CancelRestricted, OrderStatusUnknown
from apps.orders.models import OPEN_STATUSES, Market, Order, OrderStatus, OrderType, Side
from apps.orders.selectors import fee_rates_for_user, order_for_user, orders_for_user, placement_pending
from apps.orders.services import open_orders_cancel, order_cancel, order_cancel_by_client_id, order_judge, order_place

from . import limits
from .endpoint import Call, Security, endpoint
from .errors import (
    CANCEL_REJECTED,
    INVALID_ORDER_TYPE,
    INVALID_SIDE,
    INVALID_TIF,
    MANDATORY_PARAM_EMPTY_OR_MALFORMED,
    NEW_ORDER_REJECTED,
    NO_SUCH_ORDER,
    PARAM_NOT_REQUIRED,
    UNKNOWN_ORDER_COMPOSITION,
    BinanceError,
    from_domain,
    status_unknown,
)
from .market_data import markets_by_symbol, symbol_market, time_range
from .params import Params
from .selectors import order_by_client_id, taker_fills, user_orders, user_trades
from .shapes import (
    ORDER_TYPES,
    STP_MODES,
    binance_symbol,
    fill,
    ms,
    my_trade,
    order_ack,
    order_cancelled,
    order_query,
    order_result,
)
from .signing import MAX_RECV_WINDOW_MS

CLIENT_ORDER_ID = re.compile(r"[.A-Z:/a-z0-9_-]{1,36}")
"""A new order's ``newClientOrderId`` (Binance's rule)."""
ORIG_CLIENT_ORDER_ID = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,64}")
"""An ``origClientOrderId`` naming an order: any printable text up to 64 characters, as ``/api/v1/`` takes a
``client_order_id``, so an order placed there (``é-1``, ``a b``) is found here too."""
_REFUSED_STP_MODES = ("NONE", "DECREMENT", "TRANSFER")
_ORDER_PARAMS = (
    "symbol",
    "side",
    "type",
    "timeInForce",
    "quantity",
    "quoteOrderQty",
    "price",
    "newClientOrderId",
    "newOrderRespType",
    "selfTradePreventionMode",
    "strategyId",
    "strategyType",
)
STRATEGY_TYPE_MIN = 1_000_000
"""The least ``strategyType`` Binance takes (lower values are its own)."""
MAX_INT32 = 2**31 - 1


def _not_required(name: str) -> BinanceError:
    return BinanceError(PARAM_NOT_REQUIRED, f"Parameter '{name}' sent when not required.")


def _order_arguments(params: Params, market: Market) -> dict:
    """``order_place``'s arguments from Binance's parameters (every check that needs no lock)."""
    side = params.choice("side", ("BUY", "SELL"), required=True, error=BinanceError(INVALID_SIDE, "Invalid side."))
    kind = params.choice(
        "type", ORDER_TYPES, required=True, error=BinanceError(INVALID_ORDER_TYPE, "Invalid orderType.")
    )
    tif_error = BinanceError(INVALID_TIF, "Invalid timeInForce.")
    if kind == "LIMIT":
        time_in_force = params.choice("timeInForce", ("GTC", "IOC", "FOK"), required=True, error=tif_error)
    elif params.raw("timeInForce") is not None:
        raise _not_required("timeInForce")
    else:
        time_in_force = None
    price = qty = quote_qty = None
    if kind == "MARKET":
        if params.raw("price") is not None:
            raise _not_required("price")
        qty = params.decimal("quantity", decimals=market.base.decimals)
        quote_qty = params.decimal("quoteOrderQty", decimals=market.quote.decimals)
        if qty is None and quote_qty is None:
            raise BinanceError(
                MANDATORY_PARAM_EMPTY_OR_MALFORMED,
                "Param 'quantity' or 'quoteOrderQty' must be sent, but both were empty!",
            )
        if qty is not None and quote_qty is not None:
            raise _not_required("quoteOrderQty")
        if quote_qty is not None and side == "SELL":
            raise BinanceError(UNKNOWN_ORDER_COMPOSITION, "Unsupported order combination.")
    else:
        if params.raw("quoteOrderQty") is not None:
            raise _not_required("quoteOrderQty")
        price = params.decimal("price", decimals=market.quote.decimals, required=True)
        qty = params.decimal("quantity", decimals=market.base.decimals, required=True)
    stp_name = params.raw("selfTradePreventionMode")
    if stp_name in _REFUSED_STP_MODES:
        raise BinanceError(NEW_ORDER_REJECTED, "This symbol does not allow the specified self-trade prevention mode.")
    stp_name = params.choice("selfTradePreventionMode", STP_MODES)
    client_order_id = params.text("newClientOrderId", pattern=CLIENT_ORDER_ID) or secrets.token_urlsafe(16)[:22]
    params.integer("strategyId")  # LONG
    params.integer("strategyType", minimum=STRATEGY_TYPE_MIN, maximum=MAX_INT32)  # INT
    return {
        "market": market.symbol,
        "side": Side.BUY if side == "BUY" else Side.SELL,
        "type": OrderType.MARKET if kind == "MARKET" else OrderType.LIMIT,
        "price": price,
        "qty": qty,
        "quote_qty": quote_qty,
        "time_in_force": time_in_force,
        "post_only": kind == "LIMIT_MAKER",
        "stp": None if stp_name is None else STP_MODES[stp_name],
        "client_order_id": client_order_id,
    }


def _response_type(params: Params) -> str:
    default = "ACK" if params.raw("type") == "LIMIT_MAKER" else "FULL"
    return params.choice("newOrderRespType", ("ACK", "RESULT", "FULL")) or default


def _reuse_refuse(call: Call, client_order_id: str) -> None:
    """-2010 "Duplicate order sent." for a ``newClientOrderId`` whose order has ended (filled, cancelled, expired)
    and was placed more than ``MAX_RECV_WINDOW_MS`` (60 s) before this request.

    Sent again within that time (the longest a signed request lives: a bot's retry of an order whose answer it
    lost), or while the order is still open, the id returns the order as placed, not a second one. Later, a bot
    reusing an id for a new order (a grid bot's level, as Binance allows once the first order has ended) would
    have had a finished order back and counted a fill that never happened (break-it review); it is refused
    instead, and nothing is placed: a new order needs a new id here (the id is unique per user for ever).
    """
    earlier = order_by_client_id(user_id=call.user_id, client_order_id=client_order_id)
    if earlier is None or earlier.status in OPEN_STATUSES:
        return
    if call.now_ms - ms(earlier.created_at) > MAX_RECV_WINDOW_MS:
        raise BinanceError(NEW_ORDER_REJECTED, "Duplicate order sent.")


@endpoint(weight=1, security=Security.TRADE, params=_ORDER_PARAMS)
def order_new(call: Call) -> dict:
    """Place an order (``POST /api/v3/order``): ACK, RESULT or FULL (with the taker's ``fills``)."""
    market = symbol_market(call.params)
    arguments = _order_arguments(call.params, market)
    response_type = _response_type(call.params)
    call.headers.update(limits.orders_count(user_id=call.user_id, now=call.now_ms / 1000))
    _reuse_refuse(call, arguments["client_order_id"])
    try:
        order = order_place(user_id=call.user_id, **arguments)
    except DomainError as error:
        raise from_domain(error, placing=True) from None
    transact = ms(order.created_at)  # its placement's, a replay's too (not its last change's)
    if response_type == "ACK":
        return order_ack(order, market, transact)
    out = order_result(order, market, transact)
    if response_type == "FULL":
        out["fills"] = [fill(trade, market) for trade in taker_fills(order_id=order.id)]
    return out


@endpoint(weight=1, security=Security.TRADE, params=_ORDER_PARAMS + ("computeCommissionRates",))
def order_test(call: Call) -> dict:
    """``POST /api/v3/order/test``: the order is judged as a placement would judge it (filters, funds,
    post-only, fill-or-kill) by :func:`apps.orders.services.order_judge`, inline and rolled back: nothing stays,
    and nothing reaches a sequencer."""
    market = symbol_market(call.params)
    arguments = _order_arguments(call.params, market)
    _response_type(call.params)
    compute = call.params.choice("computeCommissionRates", ("true", "false")) == "true"
    try:
        order_judge(user_id=call.user_id, **arguments)
    except DomainError as error:
        raise from_domain(error, placing=True) from None
    if not compute:
        return {}
    maker, taker = fee_rates_for_user(user_id=call.user_id)
    return {
        "standardCommissionForOrder": {"maker": f"{maker:.8f}", "taker": f"{taker:.8f}"},
        "taxCommissionForOrder": {"maker": "0.00000000", "taker": "0.00000000"},
        "discount": {"enabledForAccount": False, "enabledForSymbol": False, "discountAsset": "", "discount": "0"},
    }


def _find_order(call: Call, market: Market, *, missing: BinanceError) -> Order:
    """The caller's order on ``market`` named by ``orderId`` or ``origClientOrderId``; ``missing`` otherwise, or -1007
    status unknown (HTTP 504) while a placement under that ``origClientOrderId`` is still queued for the engine."""
    order_id = call.params.integer("orderId", minimum=1)
    client_id = call.params.text("origClientOrderId", pattern=ORIG_CLIENT_ORDER_ID)
    if order_id is None and client_id is None:
        raise BinanceError(
            MANDATORY_PARAM_EMPTY_OR_MALFORMED,
            "Param 'origClientOrderId' or 'orderId' must be sent, but both were empty/null!",
        )
    order: Order | None
    if order_id is not None:
        try:
            order = order_for_user(user_id=call.user_id, order_id=order_id)
        except DomainError:
            raise missing from None
        if client_id is not None and order.client_order_id != client_id:
            raise missing
    else:
        assert client_id is not None  # one of the two was sent (checked above)
        order = order_by_client_id(user_id=call.user_id, client_order_id=client_id)
        if order is None:  # the queue is read only on a miss (placement_pending: then the order again)
            if placement_pending(user_id=call.user_id, client_order_id=client_id):
                raise status_unknown()  # queued for the engine: not "no such order", it may still be placed
            order = order_by_client_id(user_id=call.user_id, client_order_id=client_id)
    if order is None or order.market_id != market.id:
        raise missing
    return order


@endpoint(weight=4, security=Security.USER_DATA, params=("symbol", "orderId", "origClientOrderId"))
def order_get(call: Call) -> dict:
    market = symbol_market(call.params)
    order = _find_order(call, market, missing=BinanceError(NO_SUCH_ORDER, "Order does not exist."))
    return order_query(order, market)


_CANCEL_RESTRICTIONS = {"ONLY_NEW": OrderStatus.OPEN, "ONLY_PARTIALLY_FILLED": OrderStatus.PARTIALLY_FILLED}
"""Binance's ``cancelRestrictions``: the one status a cancel may find the order in (``only_status`` of the cancel
service, judged when the cancel is applied, not when the request arrives: break-it review, an ``ONLY_NEW`` cancel
checked on receipt cancelled an order a fill had reached while the cancel waited in the engine's queue)."""


def _cancel(cancel: Callable[[], Order], market: Market, cancel_client_id: str) -> dict:
    """Binance's answer to ``cancel()`` (a cancel service): the order cancelled, -2011 for one it cannot cancel."""
    try:
        cancelled = cancel()
    except OrderStatusUnknown:  # queued for the engine, not refused: it may still be cancelled
        raise status_unknown() from None
    except CancelRestricted:
        raise BinanceError(CANCEL_REJECTED, "Order was not canceled due to cancel restrictions.") from None
    except DomainError:  # none, or ended meanwhile (filled, expired): Binance's answer for an order it cannot cancel
        raise BinanceError(CANCEL_REJECTED, "Unknown order sent.") from None
    return order_cancelled(cancelled, market, cancel_client_id, ms(cancelled.updated_at))


@endpoint(
    weight=1,
    security=Security.TRADE,
    params=("symbol", "orderId", "origClientOrderId", "newClientOrderId", "cancelRestrictions"),
)
def order_delete(call: Call) -> dict:
    """Cancel one order (``DELETE /api/v3/order``); an unknown or ended order is -2011.

    By ``origClientOrderId`` alone (no ``orderId``) the market's sequencer looks the order up when the cancel's turn
    comes (:func:`apps.orders.services.order_cancel_by_client_id`), so the caller's placement still queued before it
    is cancelled (or, under ``cancelRestrictions``, judged), not answered -2011 or -1007 and left to go live later."""
    market = symbol_market(call.params)
    cancel_id = call.params.text("newClientOrderId", pattern=CLIENT_ORDER_ID) or secrets.token_urlsafe(16)[:22]
    restriction = call.params.choice("cancelRestrictions", ("ONLY_NEW", "ONLY_PARTIALLY_FILLED"))
    client_id = call.params.text("origClientOrderId", pattern=ORIG_CLIENT_ORDER_ID)
    only_status = _CANCEL_RESTRICTIONS.get(restriction or "", "")
    if client_id is not None and call.params.raw("orderId") is None:
        cancel = partial(
            order_cancel_by_client_id,
            user_id=call.user_id,
            market=market.symbol,
            client_order_id=client_id,
            cancel_client_order_id=cancel_id,
            only_status=only_status,
        )
        return _cancel(cancel, market, cancel_id)
    order = _find_order(call, market, missing=BinanceError(CANCEL_REJECTED, "Unknown order sent."))
    cancel = partial(
        order_cancel,
        order_id=order.id,
        user_id=order.user_id,
        cancel_client_order_id=cancel_id,
        only_status=only_status,
    )
    return _cancel(cancel, market, cancel_id)


@endpoint(weight=lambda params: 6 if params.raw("symbol") else 80, security=Security.USER_DATA, params=("symbol",))
def open_orders(call: Call) -> list:
    market = symbol_market(call.params, required=False)
    orders = orders_for_user(user_id=call.user_id, market=None if market is None else market.symbol, status="open")
    markets = {m.id: m for m in markets_by_symbol().values()}
    return [order_query(order, markets[order.market_id]) for order in reversed(list(orders))]


@endpoint(weight=1, security=Security.TRADE, params=("symbol",))
def open_orders_delete(call: Call) -> list:
    """Cancel every open order of the caller on ``symbol``; each cancelled order, oldest first. With none open,
    -2011 "Unknown order sent." (HTTP 400), as Binance answers.

    One command of the market's sequencer (:func:`apps.orders.services.open_orders_cancel`), applied in queue
    order: the caller's placements queued before it are cancelled too, none after it."""
    market = symbol_market(call.params)
    try:
        cancelled = open_orders_cancel(user_id=call.user_id, market=market.symbol)
    except OrderStatusUnknown:  # queued for the engine: its outcome is not known yet, never answered as none
        raise status_unknown() from None
    if not cancelled:
        raise BinanceError(CANCEL_REJECTED, "Unknown order sent.")
    # Each answer's clientOrderId is the one its CANCELED execution report carries (``c``: the order's own, as the
    # command names no cancel id); a fresh id per answer matched nothing on the user stream (break-it review D).
    return [order_cancelled(order, market, order.client_order_id, ms(order.updated_at)) for order in cancelled]


@endpoint(weight=20, security=Security.USER_DATA, params=("symbol", "orderId", "startTime", "endTime", "limit"))
def all_orders(call: Call) -> list:
    market = symbol_market(call.params)
    start, end = time_range(call.params, max_hours=24)
    orders = user_orders(
        user_id=call.user_id,
        market=market,
        limit=call.params.integer("limit", default=500, minimum=1, maximum=1000),
        from_order_id=call.params.integer("orderId", minimum=1),
        start=start,
        end=end,
    )
    return [order_query(order, market) for order in orders]


@endpoint(
    weight=lambda params: 5 if params.raw("orderId") else 20,
    security=Security.USER_DATA,
    params=("symbol", "orderId", "startTime", "endTime", "fromId", "limit"),
)
def my_trades(call: Call) -> list:
    market = symbol_market(call.params)
    start, end = time_range(call.params, max_hours=24)
    rows = user_trades(
        user_id=call.user_id,
        market=market,
        limit=call.params.integer("limit", default=500, minimum=1, maximum=1000),
        order_id=call.params.integer("orderId", minimum=1),
        from_number=call.params.integer("fromId"),
        start=start,
        end=end,
    )
    return [my_trade(trade, market, call.user_id) for trade in rows]


def _rate(value) -> str:
    return f"{value:.8f}"


@endpoint(weight=20, security=Security.USER_DATA, params=("omitZeroBalances",))
def account(call: Call) -> dict:
    """Balances (``free`` = available, ``locked`` = held by open orders and pending withdrawals), commission rates
    (``makerCommission`` in basis points, truncated; ``commissionRates`` exact), and what the key may do now:
    ``canTrade`` / ``canWithdraw`` need the key's scope and no operator's restriction (trading frozen,
    withdrawals blocked: :mod:`apps.accounts.restrictions`); ``canWithdraw`` also a second factor, as
    :class:`apps.api.permissions.HasScope` asks of a withdrawal."""
    omit_zero = call.params.choice("omitZeroBalances", ("true", "false")) == "true"
    maker, taker = fee_rates_for_user(user_id=call.user_id)
    balances = [
        {"asset": b.asset, "free": f"{b.available:f}", "locked": f"{b.held:f}"}
        for b in balances_for_user(call.user_id)
        if not (omit_zero and b.total == 0)
    ]
    scopes = set(call.api_key.scopes)
    restriction = account_restriction(user_id=call.user_id)
    frozen = restriction is not None and restriction.trading_frozen
    blocked = restriction is not None and restriction.withdrawals_blocked
    return {
        "makerCommission": int(maker * 10000),
        "takerCommission": int(taker * 10000),
        "buyerCommission": 0,
        "sellerCommission": 0,
        "commissionRates": {"maker": _rate(maker), "taker": _rate(taker), "buyer": _rate(0), "seller": _rate(0)},
        "canTrade": "trade" in scopes and not frozen,
        "canWithdraw": "withdraw" in scopes and not blocked and user_has_second_factor(user_id=call.user_id),
        "canDeposit": True,
        "brokered": False,
        "requireSelfTradePrevention": False,
        "preventSor": False,
        "updateTime": call.now_ms,
        "accountType": "SPOT",
        "balances": balances,
        "permissions": ["SPOT"],
        "uid": call.user_id,
    }


@endpoint(weight=20, security=Security.USER_DATA, params=("symbol",))
def account_commission(call: Call) -> dict:
    market = symbol_market(call.params)
    maker, taker = fee_rates_for_user(user_id=call.user_id)
    zero = {"maker": _rate(0), "taker": _rate(0), "buyer": _rate(0), "seller": _rate(0)}
    return {
        "symbol": binance_symbol(market),
        "standardCommission": {"maker": _rate(maker), "taker": _rate(taker), "buyer": _rate(0), "seller": _rate(0)},
        "specialCommission": zero,
        "taxCommission": zero,
        "discount": {"enabledForAccount": False, "enabledForSymbol": False, "discountAsset": "", "discount": "0"},
    }
