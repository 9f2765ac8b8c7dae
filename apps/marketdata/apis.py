"""REST API of market data (API.md "Additions"): candles, 24-hour tickers, the server's time. All public.

Prices are formatted at the quote asset's precision, ``volume`` at the base's, ``quote_volume``
at the quote's; ``change_percent`` has two decimal places. Times are ISO 8601 UTC.
"""

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from apps.api.base import ScopedApiView, limit_param, path_name
from apps.api.fields import AmountOut, ApiTime
from apps.api.pagination import time_window
from apps.core.errors import DomainError
from apps.orders.selectors import market_get

from .intervals import KLINE_INTERVALS
from .selectors import DEFAULT_CANDLES, MAX_CANDLES, Ticker, candles, ticker_24h, tickers_24h


def _base(row, context: dict) -> int:
    """The precision of the base asset of the market in the serializer's context."""
    return context["market"].base.decimals


def _quote(row, context: dict) -> int:
    """The precision of the quote asset of the market in the serializer's context."""
    return context["market"].quote.decimals


def _ticker_base(ticker: Ticker, context: dict) -> int:
    return ticker.market.base.decimals


def _ticker_quote(ticker: Ticker, context: dict) -> int:
    return ticker.market.quote.decimals


class CandleOut(serializers.Serializer):
    """A candle (kline): open, high, low and close prices, volumes and the count of trades in one interval."""

    # context["market"] is the candle's market, with its assets.
    open_time = ApiTime()
    close_time = ApiTime(help_text="The last instant inside the candle (the next candle's open_time - 1 µs).")
    open = AmountOut(decimals=_quote)
    high = AmountOut(decimals=_quote)
    low = AmountOut(decimals=_quote)
    close = AmountOut(decimals=_quote)
    volume = AmountOut(decimals=_base, help_text="Base quantity traded.")
    quote_volume = AmountOut(decimals=_quote, help_text="Quote quantity traded.")
    trades = serializers.IntegerField()


class _Percent(serializers.CharField):
    """A Decimal percentage written exactly (``f"{value:f}"``)."""

    def to_representation(self, value):
        return f"{value:f}"


class TickerOut(serializers.Serializer):
    """A market's rolling 24-hour figures, with the best bid and ask now."""

    symbol = serializers.CharField()
    last = AmountOut(
        decimals=_ticker_quote, allow_null=True, help_text="Price of the last trade (even before the window)."
    )
    open = AmountOut(
        decimals=_ticker_quote, allow_null=True, help_text="First trade of the last 24 hours; null without one."
    )
    high = AmountOut(decimals=_ticker_quote, allow_null=True)
    low = AmountOut(decimals=_ticker_quote, allow_null=True)
    change = AmountOut(decimals=_ticker_quote, allow_null=True, help_text="last - open.")
    change_percent = _Percent(allow_null=True, help_text="change / open * 100, two decimal places.")
    volume = AmountOut(decimals=_ticker_base, help_text="Base quantity traded in the window.")
    quote_volume = AmountOut(decimals=_ticker_quote, help_text="Quote quantity traded in the window.")
    trades = serializers.IntegerField()
    bid = AmountOut(decimals=_ticker_quote, allow_null=True, help_text="Best bid price now.")
    bid_qty = AmountOut(decimals=_ticker_base, allow_null=True)
    ask = AmountOut(decimals=_ticker_quote, allow_null=True, help_text="Best ask price now.")
    ask_qty = AmountOut(decimals=_ticker_base, allow_null=True)
    open_time = ApiTime(help_text="Start of the window: 24 hours before close_time.")
    close_time = ApiTime(help_text="End of the window: the time of the request.")


class TimeOut(serializers.Serializer):
    """The server's clock."""

    time = ApiTime()


_SYMBOL = OpenApiParameter("symbol", str, OpenApiParameter.PATH, description="Market symbol, such as BTC-USDT.")


class CandleListApi(ScopedApiView):
    """The market's candles (klines) of one interval, oldest first; intervals without a trade are absent."""

    permission_classes = [AllowAny]
    query_params = ("interval", "start", "end", "limit")

    @extend_schema(
        parameters=[
            _SYMBOL,
            OpenApiParameter("interval", str, required=True, enum=list(KLINE_INTERVALS)),
            OpenApiParameter(
                "start", OpenApiTypes.DATETIME, required=False, description="Candles opening at or after (ISO 8601)."
            ),
            OpenApiParameter("end", OpenApiTypes.DATETIME, required=False, description="Candles opening before."),
            OpenApiParameter(
                "limit", int, required=False, description=f"1 to {MAX_CANDLES}; {DEFAULT_CANDLES} by default."
            ),
        ],
        responses=CandleOut(many=True),
        auth=[],
    )
    def get(self, request, symbol: str):
        """With ``start``: the first ``limit`` candles from it; otherwise the last ``limit`` (before ``end``)."""
        market = market_get(symbol=path_name(symbol, what="market"))
        interval = request.query_params.get("interval")
        if interval is None:
            raise DomainError("interval is required.", fields={"interval": "Required."})
        start, end = time_window(request)
        rows = candles(
            market=market.symbol,
            interval=interval,
            start=start,
            end=end,
            limit=limit_param(request, default=DEFAULT_CANDLES, maximum=MAX_CANDLES),
        )
        return Response(CandleOut(rows, many=True, context={"market": market}).data)


class TickerApi(ScopedApiView):
    """The market's rolling 24-hour figures, with the best bid and ask."""

    permission_classes = [AllowAny]

    @extend_schema(parameters=[_SYMBOL], responses=TickerOut, auth=[])
    def get(self, request, symbol: str):
        return Response(TickerOut(ticker_24h(market=path_name(symbol, what="market"))).data)


class TickerListApi(ScopedApiView):
    """The rolling 24-hour figures of every market, by symbol, all over the same window."""

    permission_classes = [AllowAny]

    @extend_schema(responses=TickerOut(many=True), auth=[])
    def get(self, request):
        return Response(TickerOut(tickers_24h(), many=True).data)


class ServerTimeApi(ScopedApiView):
    """The server's clock (UTC), for clients that sign requests with a timestamp."""

    permission_classes = [AllowAny]

    @extend_schema(responses=TimeOut, auth=[])
    def get(self, request):
        return Response(TimeOut({"time": timezone.now()}).data)
