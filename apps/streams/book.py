"""A client's local order book kept from the depth stream, by Binance's procedure.

"How to manage a local order book correctly": buffer the ``<symbol>@depth`` stream, fetch the
REST depth (``GET /api/v1/markets/{symbol}/depth/``, its ``last_update_id``), drop buffered
events with ``u <= last_update_id``, check that the first one left spans ``last_update_id + 1``
and that each later one starts where the previous ended (``U`` = last ``u`` + 1), and set each
level to its quantity (0 removes it). The tests, the soak and the benchmark follow the streams
with it; it is also the reference for clients.
"""

from decimal import Decimal


class Gap(Exception):
    """A depth event that does not continue the book."""


class LocalBook:
    """A book rebuilt from a REST snapshot and the depth stream; ``last_update_id`` is where it is."""

    def __init__(self):
        self.bids: dict[Decimal, Decimal] = {}
        self.asks: dict[Decimal, Decimal] = {}
        self.last_update_id: int | None = None
        self.buffer: list[dict] = []

    def on_event(self, event: dict) -> None:
        """Buffer a ``depthUpdate`` until a snapshot is applied, then apply it; raises :class:`Gap`."""
        if self.last_update_id is None:
            self.buffer.append(event)
        else:
            self._apply(event)

    def snapshot(self, depth: dict) -> bool:
        """Start from ``depth`` (REST); False when the buffered events begin after it (fetch a newer one)."""
        if self.buffer and self.buffer[0]["U"] > depth["last_update_id"] + 1:
            return False
        self.bids = {Decimal(p): Decimal(q) for p, q in depth["bids"]}
        self.asks = {Decimal(p): Decimal(q) for p, q in depth["asks"]}
        self.last_update_id = depth["last_update_id"]
        buffered, self.buffer = self.buffer, []
        for event in buffered:
            self._apply(event)
        return True

    def _apply(self, event: dict) -> None:
        """Drop an event the book already has; apply one that continues it; raise :class:`Gap` otherwise."""
        last = self.last_update_id
        assert last is not None, "applied only once a snapshot is in"
        if event["u"] <= last:
            return
        if not event["U"] <= last + 1 <= event["u"]:
            raise Gap(f"event {event['U']}..{event['u']} after {last}")
        for side, levels in ((self.bids, event["b"]), (self.asks, event["a"])):
            for price, qty in levels:
                if Decimal(qty):
                    side[Decimal(price)] = Decimal(qty)
                else:
                    side.pop(Decimal(price), None)
        self.last_update_id = event["u"]

    def levels(self) -> tuple[list, list]:
        """``(bids best first, asks best first)`` as ``[price, qty]`` of Decimals."""
        return (
            [[p, q] for p, q in sorted(self.bids.items(), reverse=True)],
            [[p, q] for p, q in sorted(self.asks.items())],
        )
