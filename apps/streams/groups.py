"""Channel-layer group names of the streams (Channels allows ``[a-zA-Z0-9._-]`` only, no ``@``)."""

# The public streams a market has (Binance's names after the ``@``).
MARKET_STREAMS = ("depth", "trade", "bookTicker")


def market_group(stream_symbol: str, stream: str) -> str:
    """``btcusdt``, ``depth`` -> ``market.btcusdt.depth``."""
    return f"market.{stream_symbol}.{stream}"


def user_group(user_id: int) -> str:
    """The group of one user's private events."""
    return f"user.{user_id}"
