"""REST API of the orders app (API.md): markets and their public data, the user's orders and fills.

Prices are in the quote asset and formatted at its precision, quantities in the base asset
at its precision, fees in the asset they were taken in. Market data (markets, depth,
public trades) is public; a user's orders and fills need ``read``, placing and cancelling
orders ``trade``.
"""

from datetime import datetime

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from apps.api.base import ScopedApiView, limit_param, path_id, path_name, text_param
from apps.api.fields import (
    AmountInput,
    AmountOut,
    ApiTime,
    BlankAsNull,
    BlankAsNullChoice,
    InputSerializer,
    JsonBoolean,
    Text,
)
from apps.api.idempotency import HEADER as IDEMPOTENCY_HEADER
from apps.api.idempotency import idempotent
from apps.api.pagination import LIST_PARAMS, id_page, page_params, page_response
from apps.api.schema import IDEMPOTENCY_KEY_PARAMETER, LIST_PARAMETERS, list_of
from apps.core.errors import DomainError, NotFound
from apps.ledger.amounts import format_amount
from apps.ledger.errors import InsufficientFunds

from .errors import OrderStatusUnknown
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
    market_of_order,
    order_book_depth,
    order_for_user,
    orders_for_user,
    placement_pending,
    recent_trades,
)
from .services import order_cancel, order_place

# Book levels and public trades returned when no ``limit`` is given.
DEFAULT_MARKET_DATA_LIMIT = 50


# Serializers: the schema, and the output (XOut(obj).data) ------------------------------------------


def _base(row, context: dict) -> int:
    """The precision of the base asset of the market in the serializer's context."""
    return context["market"].base.decimals


def _quote(row, context: dict) -> int:
    """The precision of the quote asset of the market in the serializer's context."""
    return context["market"].quote.decimals


def _received(row, context: dict) -> int:
    """The precision of what an order or fill receives (its fee's asset): base for a buy, quote for a sell."""
    return _base(row, context) if row.side == Side.BUY else _quote(row, context)


def _given(row, context: dict) -> int:
    """The precision of what an order gives (what it holds): quote for a buy, base for a sell."""
    return _quote(row, context) if row.side == Side.BUY else _base(row, context)


class MarketOut(serializers.Serializer):
    """A market with its filters and status."""

    symbol = serializers.CharField(help_text="BASE-QUOTE, such as BTC-USDT.")
    base = serializers.CharField(source="base.code")
    quote = serializers.CharField(source="quote.code")
    tick_size = AmountOut(decimals="quote.decimals", help_text="Prices are multiples of it (quote asset).")
    step_size = AmountOut(decimals="base.decimals", help_text="Quantities are multiples of it (base asset).")
    min_qty = AmountOut(decimals="base.decimals")
    max_qty = AmountOut(decimals="base.decimals")
    min_notional = AmountOut(decimals="quote.decimals", help_text="Smallest order value, in the quote asset.")
    status = serializers.ChoiceField(choices=MarketStatus.choices)


class _LevelsOut(serializers.ListField):
    """Book levels ``[(price, quantity)]`` written as ``[["price", "quantity"]]`` at the market's precisions."""

    def __init__(self, **kwargs):
        super().__init__(
            child=serializers.ListField(child=serializers.CharField(), min_length=2, max_length=2), **kwargs
        )

    def to_representation(self, data):
        base, quote = _base(None, self.context), _quote(None, self.context)
        return [[format_amount(price, quote), format_amount(qty, base)] for price, qty in data]


class DepthOut(serializers.Serializer):
    """The order book aggregated by price level."""

    # context["market"] is the book's market, with its assets.
    bids = _LevelsOut(help_text="[price, quantity] levels, best (highest) first.")
    asks = _LevelsOut(help_text="[price, quantity] levels, best (lowest) first.")
    sequence = serializers.IntegerField(help_text="The book's sequence: it rises with every placement and cancel.")
    last_update_id = serializers.IntegerField(
        source="sequence",
        help_text="The last book update in this snapshot: apply the depth stream's events with u above it.",
    )


class MarketTradeOut(serializers.Serializer):
    """A trade of the market; its side is the taker's."""

    # context["market"] is the trade's market (the precision of its prices and quantities).

    id = serializers.CharField()
    price = AmountOut(decimals=_quote)
    qty = AmountOut(decimals=_base)
    side = serializers.ChoiceField(source="taker_side", choices=Side.choices, help_text="The taker's side.")
    time = ApiTime(source="created_at")


class OrderIn(InputSerializer):
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
    post_only = JsonBoolean(required=False, default=False)
    stp = serializers.ChoiceField(
        choices=SelfTradePrevention.choices,
        required=False,
        allow_null=True,
        help_text="Self-trade prevention; expire_taker by default.",
    )
    client_order_id = Text(
        max_length=64,
        printable=True,
        required=False,
        allow_blank=True,
        allow_null=True,
        default="",
        help_text="Unique per user: the same order again returns the original, another order with it is a 409. "
        "Empty or null: none (as an order without one shows it).",
    )

    def validate_client_order_id(self, value: str | None) -> str:
        """``null`` is no client order id, as ``""`` is (an order without one shows ``null``)."""
        return value or ""


class OrderOut(serializers.Serializer):
    """An order of the user's, with what it has filled and still holds."""

    # context["market"] is the order's market, with its assets (the precision of each amount).

    id = serializers.IntegerField()
    client_order_id = BlankAsNull()
    market = serializers.SerializerMethodField()
    side = serializers.ChoiceField(choices=Side.choices)
    type = serializers.ChoiceField(choices=OrderType.choices)
    price = AmountOut(decimals=_quote, allow_null=True)
    qty = AmountOut(decimals=_base, allow_null=True)
    quote_qty = AmountOut(decimals=_quote, allow_null=True)
    filled_qty = AmountOut(decimals=_base)
    filled_quote_qty = AmountOut(decimals=_quote)
    fee_total = AmountOut(
        decimals=_received, help_text="In the asset the order receives: base for a buy, quote for a sell."
    )
    held_remaining = AmountOut(decimals=_given, help_text="Still held: quote for a buy, base for a sell.")
    time_in_force = serializers.ChoiceField(choices=TimeInForce.choices)
    post_only = serializers.BooleanField()
    stp = serializers.ChoiceField(choices=SelfTradePrevention.choices)
    status = serializers.ChoiceField(choices=OrderStatus.choices)
    reject_reason = BlankAsNullChoice(
        choices=[choice for choice in EndReason.choices if choice[0]],
        help_text="Why the order ended other than by filling.",
    )
    created_at = ApiTime()
    updated_at = ApiTime()

    def get_market(self, order: Order) -> str:
        return self.context["market"].symbol


class FillOut(serializers.Serializer):
    """A fill of one of the user's orders, as maker or taker."""

    # context["market"] is the fill's market, with its assets.

    id = serializers.CharField()
    order_id = serializers.IntegerField()
    market = serializers.CharField()
    side = serializers.ChoiceField(choices=Side.choices)
    price = AmountOut(decimals=_quote)
    qty = AmountOut(decimals=_base)
    quote_qty = AmountOut(decimals=_quote)
    fee = AmountOut(decimals=_received)
    fee_asset = serializers.CharField()
    liquidity = serializers.ChoiceField(choices=[("maker", "maker"), ("taker", "taker")])
    time = ApiTime()


def _market_param(request) -> str | None:
    """The ``market`` query parameter of a list, if given; an unknown market is a 404 naming the field (as the
    market's own pages answer), never an empty list that reads as "no orders"."""
    symbol = text_param(request, "market")
    return None if symbol is None else market_get(symbol=symbol).symbol


def _order_out(order: Order, market: Market):
    """``OrderOut`` of ``order``; ``market`` is the order's, with its assets."""
    return OrderOut(order, context={"market": market}).data


def _markets_by_id() -> dict[int, Market]:
    return {market.id: market for market in market_list()}


# Public market data ----------------------------------------------------------------------------------


class MarketListApi(ScopedApiView):
    """Every market with its filters (tick, step, quantity limits, minimum notional) and status."""

    permission_classes = [AllowAny]

    @extend_schema(responses=MarketOut(many=True), auth=[])
    def get(self, request):
        return Response(MarketOut(market_list(), many=True).data)


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
        return Response(DepthOut(depth, context={"market": market}).data)


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
        return page_response(
            page,
            trades,
            key_of=lambda trade: (trade.taker_order_id, trade.seq),
            out=lambda trade: MarketTradeOut(trade, context={"market": market}).data,
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
        except InsufficientFunds as error:
            # The ledger judges the hold, not a field: name the amount that sized it (a budget, else the quantity).
            error.fields = error.fields or {"quote_qty" if data.get("quote_qty") is not None else "qty": error.message}
            raise
        return Response(_order_out(order, market_of_order(order)), status=201)

    return idempotent(request, perform)


class OrderListApi(ScopedApiView):
    """``GET``: the user's orders, newest first. ``POST``: place an order, matched at once."""

    method_scopes = {"GET": "read", "POST": "trade"}
    query_params = ("market", "status", "client_order_id", *LIST_PARAMS)

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
            OpenApiParameter(
                "client_order_id",
                str,
                required=False,
                description="Only the order placed with this client_order_id (what to ask after a 504 order_status_unknown).",
            ),
            *LIST_PARAMETERS,
        ],
        operation_id="v1_orders_list",
        responses=list_of(OrderOut, "Order"),
    )
    def get(self, request):
        """The user's orders, newest first, optionally of one market, open or closed, with one ``client_order_id``,
        placed in [start, end)."""
        page = page_params(request, list_name="orders", scope=f"user:{request.user.id}", key=(int,))
        client_order_id = text_param(request, "client_order_id")
        pending = client_order_id is not None and placement_pending(
            user_id=request.user.id, client_order_id=client_order_id
        )
        orders = orders_for_user(
            user_id=request.user.id,
            market=_market_param(request),
            status=text_param(request, "status"),
            client_order_id=client_order_id,
        )
        if pending and not orders.exists():
            raise OrderStatusUnknown(
                "The order is queued for the matching engine, neither placed nor refused yet: query it again.",
                fields={"client_order_id": "Queued, not yet placed or refused."},
            )
        markets = _markets_by_id()
        return page_response(
            page,
            id_page(orders, page),
            key_of=lambda order: (order.id,),
            out=lambda order: _order_out(order, markets[order.market_id]),
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
        return Response(_order_out(order, market_of_order(order)))

    @extend_schema(parameters=[_ORDER_ID], responses={200: OpenApiResponse(OrderOut, "The order, cancelled.")})
    def delete(self, request, id: str):  # noqa: A002
        """Cancel the order and release what it still holds; 409 ``invalid_state`` when it has already ended
        (filled, cancelled, expired). Another user's order is a 404."""
        order = order_cancel(order_id=path_id(id, what="order"), user_id=request.user.id)
        return Response(_order_out(order, market_of_order(order)))


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
            market=_market_param(request),
            limit=page.limit,
            before=page.before,
            start=page.start,
            end=page.end,
        )
        markets = {market.symbol: market for market in market_list()}
        return page_response(page, fills, key_of=lambda fill: fill.key, out=lambda fill: _fill_out(fill, markets))


def _fill_out(fill, markets: dict[str, Market]):
    return FillOut(fill, context={"market": markets[fill.market]}).data
