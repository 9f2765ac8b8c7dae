"""REST API of the orders app (API.md): markets and their public data, the user's orders and fills.

Prices are in the quote asset and formatted at its precision, quantities in the base asset
at its precision, fees in the asset they were taken in. Market data (markets, depth,
public trades) is public; a user's orders and fills need ``read``, placing and cancelling
orders ``trade``.
"""

from datetime import datetime
from decimal import Decimal

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from apps.api.fields import AmountInput, Text
from apps.api.idempotency import HEADER as IDEMPOTENCY_HEADER
from apps.api.idempotency import idempotent
from apps.api.pagination import LIST_PARAMS, id_page, page_params, page_response
from apps.api.schema import IDEMPOTENCY_KEY_PARAMETER, LIST_PARAMETERS, list_of
from apps.api.views import ScopedApiView, api_time, limit_param, path_id, path_name, text_param
from apps.ledger.amounts import format_amount
from apps.ledger.errors import DomainError, NotFound

from .models import (
    EndReason,
    Market,
    MarketStatus,
    Order,
    OrderStatus,
    OrderType,
    SelfTradePrevention,
    Side,
    TimeInForce,
)
from .selectors import (
    fills_for_user,
    market_get,
    market_list,
    order_book_depth,
    order_for_user,
    orders_for_user,
    recent_trades,
)
from .services import order_cancel, order_place

# Book levels and public trades returned when no ``limit`` is given.
DEFAULT_MARKET_DATA_LIMIT = 50


# Serializers (the schema; views build plain dicts) --------------------------------------------------


class MarketOut(serializers.Serializer):
    symbol = serializers.CharField(help_text="BASE-QUOTE, such as BTC-USDT.")
    base = serializers.CharField()
    quote = serializers.CharField()
    tick_size = serializers.CharField(help_text="Prices are multiples of it (quote asset).")
    step_size = serializers.CharField(help_text="Quantities are multiples of it (base asset).")
    min_qty = serializers.CharField()
    max_qty = serializers.CharField()
    min_notional = serializers.CharField(help_text="Smallest order value, in the quote asset.")
    status = serializers.ChoiceField(choices=MarketStatus.choices)


class DepthOut(serializers.Serializer):
    bids = serializers.ListField(
        child=serializers.ListField(child=serializers.CharField(), min_length=2, max_length=2),
        help_text="[price, quantity] levels, best (highest) first.",
    )
    asks = serializers.ListField(
        child=serializers.ListField(child=serializers.CharField(), min_length=2, max_length=2),
        help_text="[price, quantity] levels, best (lowest) first.",
    )
    sequence = serializers.IntegerField(help_text="The book's sequence: it rises with every placement and cancel.")
    last_update_id = serializers.IntegerField(
        help_text="The last book update in this snapshot: apply the depth stream's events with u above it."
    )


class MarketTradeOut(serializers.Serializer):
    id = serializers.CharField()
    price = serializers.CharField()
    qty = serializers.CharField()
    side = serializers.ChoiceField(choices=Side.choices, help_text="The taker's side.")
    time = serializers.DateTimeField()


class OrderIn(serializers.Serializer):
    market = Text(max_length=21, help_text="Market symbol, such as BTC-USDT.")
    side = serializers.ChoiceField(choices=Side.choices)
    type = serializers.ChoiceField(choices=OrderType.choices)
    price = AmountInput(required=False, allow_null=True, help_text="Limit orders: quote per base, on the tick.")
    qty = AmountInput(required=False, allow_null=True, help_text="Base quantity, on the step.")
    quote_qty = AmountInput(required=False, allow_null=True, help_text="Market buys: a budget in the quote asset.")
    time_in_force = serializers.ChoiceField(
        choices=TimeInForce.choices,
        required=False,
        allow_null=True,
        help_text="GTC (limit orders' default), IOC (market orders' default) or FOK.",
    )
    post_only = serializers.BooleanField(required=False, default=False)
    stp = serializers.ChoiceField(
        choices=SelfTradePrevention.choices,
        required=False,
        allow_null=True,
        help_text="Self-trade prevention; expire_taker by default.",
    )
    client_order_id = Text(
        max_length=64,
        required=False,
        allow_blank=True,
        default="",
        help_text="Unique per user: the same order again returns the original, another order with it is a 409.",
    )


class OrderOut(serializers.Serializer):
    id = serializers.IntegerField()
    client_order_id = serializers.CharField(allow_null=True)
    market = serializers.CharField()
    side = serializers.ChoiceField(choices=Side.choices)
    type = serializers.ChoiceField(choices=OrderType.choices)
    price = serializers.CharField(allow_null=True)
    qty = serializers.CharField(allow_null=True)
    quote_qty = serializers.CharField(allow_null=True)
    filled_qty = serializers.CharField()
    filled_quote_qty = serializers.CharField()
    fee_total = serializers.CharField(help_text="In the asset the order receives: base for a buy, quote for a sell.")
    held_remaining = serializers.CharField(help_text="Still held: quote for a buy, base for a sell.")
    time_in_force = serializers.ChoiceField(choices=TimeInForce.choices)
    post_only = serializers.BooleanField()
    stp = serializers.ChoiceField(choices=SelfTradePrevention.choices)
    status = serializers.ChoiceField(choices=OrderStatus.choices)
    reject_reason = serializers.ChoiceField(
        choices=[choice for choice in EndReason.choices if choice[0]],
        allow_null=True,
        help_text="Why the order ended other than by filling.",
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class FillOut(serializers.Serializer):
    id = serializers.CharField()
    order_id = serializers.IntegerField()
    market = serializers.CharField()
    side = serializers.ChoiceField(choices=Side.choices)
    price = serializers.CharField()
    qty = serializers.CharField()
    quote_qty = serializers.CharField()
    fee = serializers.CharField()
    fee_asset = serializers.CharField()
    liquidity = serializers.ChoiceField(choices=[("maker", "maker"), ("taker", "taker")])
    time = serializers.DateTimeField()


# Output ----------------------------------------------------------------------------------------------


def _optional(value: Decimal | None, decimals: int) -> str | None:
    return None if value is None else format_amount(value, decimals)


def market_out(market: Market) -> dict:
    """A market as the API shows it (``MarketOut``)."""
    base, quote = market.base.decimals, market.quote.decimals
    return {
        "symbol": market.symbol,
        "base": market.base.code,
        "quote": market.quote.code,
        "tick_size": format_amount(market.tick_size, quote),
        "step_size": format_amount(market.step_size, base),
        "min_qty": format_amount(market.min_qty, base),
        "max_qty": format_amount(market.max_qty, base),
        "min_notional": format_amount(market.min_notional, quote),
        "status": market.status,
    }


def order_out(order: Order, market: Market) -> dict:
    """An order as the API shows it (``OrderOut``); ``market`` is the order's, with its assets."""
    base, quote = market.base.decimals, market.quote.decimals
    buy = order.side == Side.BUY
    return {
        "id": order.id,
        "client_order_id": order.client_order_id or None,
        "market": market.symbol,
        "side": order.side,
        "type": order.type,
        "price": _optional(order.price, quote),
        "qty": _optional(order.qty, base),
        "quote_qty": _optional(order.quote_qty, quote),
        "filled_qty": format_amount(order.filled_qty, base),
        "filled_quote_qty": format_amount(order.filled_quote_qty, quote),
        "fee_total": format_amount(order.fee_total, base if buy else quote),
        "held_remaining": format_amount(order.held_remaining, quote if buy else base),
        "time_in_force": order.time_in_force,
        "post_only": order.post_only,
        "stp": order.stp,
        "status": order.status,
        "reject_reason": order.reject_reason or None,
        "created_at": api_time(order.created_at),
        "updated_at": api_time(order.updated_at),
    }


def _markets_by_id() -> dict[int, Market]:
    return {market.id: market for market in market_list()}


# Public market data ----------------------------------------------------------------------------------


class MarketListApi(ScopedApiView):
    """Every market with its filters (tick, step, quantity limits, minimum notional) and status."""

    permission_classes = [AllowAny]

    @extend_schema(responses=MarketOut(many=True), auth=[])
    def get(self, request):
        return Response([market_out(market) for market in market_list()])


_LIMIT = OpenApiParameter("limit", int, required=False, description="1 to 1000; 50 by default.")
_SYMBOL = OpenApiParameter("symbol", str, OpenApiParameter.PATH, description="Market symbol, such as BTC-USDT.")


class MarketDepthApi(ScopedApiView):
    """The order book aggregated by price level: bids best first, asks best first."""

    permission_classes = [AllowAny]
    query_params = ("limit",)

    @extend_schema(parameters=[_SYMBOL, _LIMIT], responses=DepthOut, auth=[])
    def get(self, request, symbol: str):
        market = market_get(symbol=path_name(symbol, what="market"))
        depth = order_book_depth(market=market.symbol, limit=limit_param(request, default=DEFAULT_MARKET_DATA_LIMIT))
        base, quote = market.base.decimals, market.quote.decimals
        return Response(
            {
                "bids": [[format_amount(price, quote), format_amount(qty, base)] for price, qty in depth.bids],
                "asks": [[format_amount(price, quote), format_amount(qty, base)] for price, qty in depth.asks],
                "sequence": depth.sequence,
                "last_update_id": depth.sequence,
            }
        )


class MarketTradeListApi(ScopedApiView):
    """The market's recent trades, newest first; ``side`` is the taker's."""

    permission_classes = [AllowAny]
    query_params = LIST_PARAMS

    @extend_schema(
        operation_id="v1_markets_trades_list",
        parameters=[_SYMBOL, *LIST_PARAMETERS[:-1], _LIMIT],
        responses=list_of(MarketTradeOut, "MarketTrade"),
        auth=[],
    )
    def get(self, request, symbol: str):
        market = market_get(symbol=path_name(symbol, what="market"))
        page = page_params(
            request,
            list_name="market_trades",
            scope=f"market:{market.symbol}",
            key=(int, int),
            default_limit=DEFAULT_MARKET_DATA_LIMIT,
        )
        trades = recent_trades(
            market=market.symbol, limit=page.limit, before=page.before, start=page.start, end=page.end
        )
        base, quote = market.base.decimals, market.quote.decimals
        return page_response(
            page,
            trades,
            key_of=lambda trade: (trade.taker_order_id, trade.seq),
            out=lambda trade: {
                "id": trade.id,
                "price": format_amount(trade.price, quote),
                "qty": format_amount(trade.qty, base),
                "side": trade.taker_side,
                "time": api_time(trade.created_at),
            },
        )


# The user's orders and fills -------------------------------------------------------------------------


def _place(request) -> Response:
    """Validate the body's shape, then place the order; the service judges every value against the market."""
    body = OrderIn(data=request.data)
    body.is_valid(raise_exception=True)
    data = body.validated_data

    def perform() -> Response:
        try:
            order = order_place(
                user_id=request.user.id,
                market=data["market"],
                side=data["side"],
                type=data["type"],
                price=data.get("price"),
                qty=data.get("qty"),
                quote_qty=data.get("quote_qty"),
                time_in_force=data.get("time_in_force"),
                post_only=data["post_only"],
                stp=data.get("stp"),
                client_order_id=data["client_order_id"],
                idempotency_key=request.headers.get(IDEMPOTENCY_HEADER, ""),
            )
        except NotFound as error:
            # An unknown market named in the body is bad input (400), not a missing resource.
            raise DomainError(error.message, fields=error.fields) from None
        return Response(order_out(order, _markets_by_id()[order.market_id]), status=201)

    return idempotent(request, perform)


class OrderListApi(ScopedApiView):
    """``GET``: the user's orders, newest first. ``POST``: place an order, matched at once."""

    method_scopes = {"GET": "read", "POST": "trade"}
    query_params = ("market", "status", *LIST_PARAMS)

    @extend_schema(
        parameters=[
            OpenApiParameter("market", str, required=False, description="Only this market (symbol)."),
            OpenApiParameter(
                "status",
                str,
                required=False,
                enum=["open", "closed"],
                description="open: resting in the book; closed: ended.",
            ),
            *LIST_PARAMETERS,
        ],
        operation_id="v1_orders_list",
        responses=list_of(OrderOut, "Order"),
    )
    def get(self, request):
        """The user's orders, newest first, optionally of one market and open or closed, placed in [start, end)."""
        page = page_params(request, list_name="orders", scope=f"user:{request.user.id}", key=(int,))
        orders = orders_for_user(
            user_id=request.user.id,
            market=text_param(request, "market"),
            status=text_param(request, "status"),
        )
        markets = _markets_by_id()
        return page_response(
            page,
            id_page(orders, page),
            key_of=lambda order: (order.id,),
            out=lambda order: order_out(order, markets[order.market_id]),
        )

    @extend_schema(
        request=OrderIn,
        parameters=[IDEMPOTENCY_KEY_PARAMETER],
        responses={201: OrderOut},
    )
    def post(self, request):
        """Place an order. A refused order (400 with the code and field, 409 for a halted market) leaves
        nothing behind. Sent again with the same ``client_order_id`` and the same terms, it returns the
        original order as it is now; with other terms, 409 ``idempotency_conflict``."""
        return _place(request)


_ORDER_ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="The order's id.")


class OrderDetailApi(ScopedApiView):
    """``GET``: one of the user's orders. ``DELETE``: cancel it and release what it still holds."""

    method_scopes = {"GET": "read", "DELETE": "trade"}

    @extend_schema(parameters=[_ORDER_ID], responses=OrderOut)
    def get(self, request, id: str):  # noqa: A002 (API.md's name)
        """One of the user's orders; another user's order is a 404."""
        order = order_for_user(user_id=request.user.id, order_id=path_id(id, what="order"))
        return Response(order_out(order, _markets_by_id()[order.market_id]))

    @extend_schema(parameters=[_ORDER_ID], responses={200: OpenApiResponse(OrderOut, "The order, cancelled.")})
    def delete(self, request, id: str):  # noqa: A002
        """Cancel the order and release what it still holds; 409 ``invalid_state`` when it has already ended
        (filled, cancelled, expired). Another user's order is a 404."""
        order = order_cancel(order_id=path_id(id, what="order"), user_id=request.user.id)
        return Response(order_out(order, _markets_by_id()[order.market_id]))


class FillListApi(ScopedApiView):
    """The user's fills (``GET /trades/``), as maker or taker, newest first."""

    query_params = ("market", *LIST_PARAMS)

    @extend_schema(
        parameters=[
            OpenApiParameter("market", str, required=False, description="Only this market (symbol)."),
            *LIST_PARAMETERS,
        ],
        operation_id="v1_trades_list",
        responses=list_of(FillOut, "Fill"),
    )
    def get(self, request):
        page = page_params(request, list_name="fills", scope=f"user:{request.user.id}", key=(datetime, int, int))
        fills = fills_for_user(
            user_id=request.user.id,
            market=text_param(request, "market"),
            limit=page.limit,
            before=page.before,
            start=page.start,
            end=page.end,
        )
        markets = {market.symbol: market for market in market_list()}
        return page_response(page, fills, key_of=lambda fill: fill.key, out=lambda fill: _fill_out(fill, markets))


def _fill_out(fill, markets: dict[str, Market]) -> dict:
    market = markets[fill.market]
    base, quote = market.base.decimals, market.quote.decimals
    return {
        "id": fill.id,
        "order_id": fill.order_id,
        "market": fill.market,
        "side": fill.side,
        "price": format_amount(fill.price, quote),
        "qty": format_amount(fill.qty, base),
        "quote_qty": format_amount(fill.quote_qty, quote),
        "fee": format_amount(fill.fee, base if fill.side == Side.BUY else quote),
        "fee_asset": fill.fee_asset,
        "liquidity": fill.liquidity,
        "time": api_time(fill.time),
    }
