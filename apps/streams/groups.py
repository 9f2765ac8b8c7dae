"""Channel-layer group names of the streams (Channels allows ``[a-zA-Z0-9._-]`` only, no ``@``)."""

from apps.marketdata.intervals import KLINE_INTERVALS

# The public streams a market has (Binance's names after the ``@``).
KLINE_STREAMS = tuple(f"kline_{interval}" for interval in KLINE_INTERVALS)
# Binance's partial book depth streams: the best 5, 10 or 20 levels, pushed every second, or every 100 ms.
PARTIAL_DEPTH_LEVELS = (5, 10, 20)
PARTIAL_DEPTH_SPEEDS = {"": 1.0, "@100ms": 0.1}  # the stream name's suffix -> seconds between pushes
PARTIAL_DEPTH_STREAMS = tuple(
    f"depth{levels}{speed}" for levels in PARTIAL_DEPTH_LEVELS for speed in PARTIAL_DEPTH_SPEEDS
)
MARKET_STREAMS = (
    "depth",
    *PARTIAL_DEPTH_STREAMS,
    "trade",
    "aggTrade",
    "bookTicker",
    "ticker",
    "miniTicker",
    *KLINE_STREAMS,
)

# The array streams of every market, by their names: each message is the array of the markets' events that
# changed since the last one (Binance: "All Market Mini Tickers Stream", and the all-market tickers).
ALL_MARKETS_STREAMS = {"!miniTicker@arr": "miniTicker", "!ticker@arr": "ticker"}


def market_group(stream_symbol: str, stream: str) -> str:
    """``btcusdt``, ``depth`` -> ``market.btcusdt.depth``; ``depth5@100ms`` -> ``market.btcusdt.depth5.100ms``."""
    return f"market.{stream_symbol}.{stream.replace('@', '.')}"


def all_markets_group(stream: str) -> str:
    """``miniTicker`` -> ``markets.all.miniTicker``: the group of an array stream of every market."""
    return f"markets.all.{stream}"


def user_group(user_id: int) -> str:
    """The group of one user's private events."""
    return f"user.{user_id}"
