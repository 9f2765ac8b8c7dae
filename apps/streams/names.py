"""Stream names as Binance spells them: ``<symbol>@<stream>``, an all-market array stream, or a user stream key."""

import re
from dataclasses import dataclass

from .groups import ALL_MARKETS_STREAMS, MARKET_STREAMS, PARTIAL_DEPTH_LEVELS, all_markets_group, market_group

MAX_STREAMS = 200  # per connection
_KEY = re.compile(r"^[0-9a-f]{64}$")
# Binance's names of the same stream: a depth stream's update speeds (every change is published as it commits) and
# a partial depth stream's default speed.
_SAME_STREAMS = {
    "depth@100ms": "depth",
    "depth@1000ms": "depth",
    **{f"depth{levels}@1000ms": f"depth{levels}" for levels in PARTIAL_DEPTH_LEVELS},
}


class InvalidStream(ValueError):
    """A stream name that names nothing (the message says why)."""


@dataclass(frozen=True)
class PublicStream:
    """``btcusdt@depth`` or ``!miniTicker@arr``: ``stream`` is Binance's kind (``depth``, ``miniTicker``), ``group``
    the channel-layer group carrying it (one market's, or every market's for an array stream)."""

    name: str
    stream: str
    group: str


def parse_stream(name: str, symbols: set[str]) -> PublicStream | str:
    """A :class:`PublicStream`, or the user stream key ``name`` is; raises :class:`InvalidStream`.

    ``symbols`` are the markets' stream symbols (``btcusdt``). The array streams of every market are
    :data:`~apps.streams.groups.ALL_MARKETS_STREAMS`. Binance's update-speed suffix of a depth stream
    (``btcusdt@depth@100ms``, ``@1000ms``) names the same stream: every book change is published as it commits;
    ``btcusdt@depth5@1000ms`` is ``btcusdt@depth5``. A key is 64 lower-case hex characters
    (:func:`apps.streams.services.stream_token_create`); whether it is valid is for the caller to check.
    """
    if name in ALL_MARKETS_STREAMS:
        stream = ALL_MARKETS_STREAMS[name]
        return PublicStream(name, stream, all_markets_group(stream))
    if "@" not in name:
        if _KEY.match(name):
            return name
        raise InvalidStream(f"{name[:80]!r} is neither <symbol>@<stream> nor a stream key.")
    symbol, _, stream = name.partition("@")
    stream = _SAME_STREAMS.get(stream, stream)
    if symbol not in symbols:
        raise InvalidStream(f"No market {symbol[:40]!r} (symbols are lower case without a dash: btcusdt).")
    if stream not in MARKET_STREAMS:
        raise InvalidStream(
            f"No stream {stream[:40]!r}: one of {', '.join(MARKET_STREAMS)}, or {', '.join(ALL_MARKETS_STREAMS)}."
        )
    return PublicStream(name, stream, market_group(symbol, stream))
