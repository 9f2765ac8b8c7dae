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

from apps.api.base import ScopedApiView, api_time, limit_param, path_name
from apps.api.pagination import time_window
from apps.core.errors import DomainError
from apps.ledger.amounts import format_amount
from apps.orders.selectors import market_get

from .models import Interval
from .selectors import DEFAULT_CANDLES, MAX_CANDLES, Kline, Ticker, candles, ticker_24h, tickers_24h


class CandleOut(serializers.Serializer):
    open_time = serializers.DateTimeField()
    close_time = serializers.DateTimeField(
        help_text="The last instant inside the candle (open_time + interval - 1 µs)."
    )
    open = serializers.CharField()
    high = serializers.CharField()
    low = serializers.CharField()
    close = serializers.CharField()
    volume = serializers.CharField(help_text="Base quantity traded.")
    quote_volume = serializers.CharField(help_text="Quote quantity traded.")
    trades = serializers.IntegerField()


class TickerOut(serializers.Serializer):
    symbol = serializers.CharField()
    last = serializers.CharField(allow_null=True, help_text="Price of the last trade (even before the window).")
    open = serializers.CharField(allow_null=True, help_text="First trade of the last 24 hours; null without one.")
    high = serializers.CharField(allow_null=True)
    low = serializers.CharField(allow_null=True)
    change = serializers.CharField(allow_null=True, help_text="last - open.")
    change_percent = serializers.CharField(allow_null=True, help_text="change / open * 100, two decimal places.")
    volume = serializers.CharField(help_text="Base quantity traded in the window.")
    quote_volume = serializers.CharField(help_text="Quote quantity traded in the window.")
    trades = serializers.IntegerField()
    bid = serializers.CharField(allow_null=True, help_text="Best bid price now.")
    bid_qty = serializers.CharField(allow_null=True)
    ask = serializers.CharField(allow_null=True, help_text="Best ask price now.")
    ask_qty = serializers.CharField(allow_null=True)
    open_time = serializers.DateTimeField(help_text="Start of the window: 24 hours before close_time.")
    close_time = serializers.DateTimeField(help_text="End of the window: the time of the request.")


class TimeOut(serializers.Serializer):
    time = serializers.DateTimeField()


def _price(value, decimals: int) -> str | None:
    return None if value is None else format_amount(value, decimals)


def ticker_out(ticker: Ticker) -> dict:
    """A ticker as the API shows it (``TickerOut``)."""
    base, quote = ticker.market.base.decimals, ticker.market.quote.decimals
    percent = ticker.change_percent
    return {
        "symbol": ticker.symbol,
        "last": _price(ticker.last, quote),
        "open": _price(ticker.open, quote),
        "high": _price(ticker.high, quote),
        "low": _price(ticker.low, quote),
        "change": _price(ticker.change, quote),
        "change_percent": None if percent is None else f"{percent:f}",
        "volume": format_amount(ticker.volume, base),
        "quote_volume": format_amount(ticker.quote_volume, quote),
        "trades": ticker.trades,
        "bid": _price(ticker.bid, quote),
        "bid_qty": _price(ticker.bid_qty, base),
        "ask": _price(ticker.ask, quote),
        "ask_qty": _price(ticker.ask_qty, base),
        "open_time": api_time(ticker.open_time),
        "close_time": api_time(ticker.close_time),
    }


_SYMBOL = OpenApiParameter("symbol", str, OpenApiParameter.PATH, description="Market symbol, such as BTC-USDT.")


class CandleListApi(ScopedApiView):
    """The market's candles (klines) of one interval, oldest first; intervals without a trade are absent."""

    permission_classes = [AllowAny]
    query_params = ("interval", "start", "end", "limit")

    @extend_schema(
        parameters=[
            _SYMBOL,
            OpenApiParameter("interval", str, required=True, enum=Interval.values),
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
        base, quote = market.base.decimals, market.quote.decimals
        return Response([_candle_out(candle, base, quote) for candle in rows])


def _candle_out(candle: Kline, base: int, quote: int) -> dict:
    return {
        "open_time": api_time(candle.open_time),
        "close_time": api_time(candle.close_time),
        "open": format_amount(candle.open, quote),
        "high": format_amount(candle.high, quote),
        "low": format_amount(candle.low, quote),
        "close": format_amount(candle.close, quote),
        "volume": format_amount(candle.volume, base),
        "quote_volume": format_amount(candle.quote_volume, quote),
        "trades": candle.trades,
    }


class TickerApi(ScopedApiView):
    """The market's rolling 24-hour figures, with the best bid and ask."""

    permission_classes = [AllowAny]

    @extend_schema(parameters=[_SYMBOL], responses=TickerOut, auth=[])
    def get(self, request, symbol: str):
        return Response(ticker_out(ticker_24h(market=path_name(symbol, what="market"))))


class TickerListApi(ScopedApiView):
    """The rolling 24-hour figures of every market, by symbol, all over the same window."""

    permission_classes = [AllowAny]

    @extend_schema(responses=TickerOut(many=True), auth=[])
    def get(self, request):
        return Response([ticker_out(ticker) for ticker in tickers_24h()])


class ServerTimeApi(ScopedApiView):
    """The server's clock (UTC), for clients that sign requests with a timestamp."""

    permission_classes = [AllowAny]

    @extend_schema(responses=TimeOut, auth=[])
    def get(self, request):
        return Response({"time": api_time(timezone.now())})
