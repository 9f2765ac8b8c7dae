"""Clients of the live servers for the streams' tests: a WebSocket reader and Binance's local book.

:class:`LocalBook` follows Binance's "How to manage a local order book correctly": buffer the
depth stream, fetch the REST snapshot, drop buffered events with ``u <= last_update_id``, check
that the first one left spans ``last_update_id + 1`` and that each later one starts where the
previous ended, and apply each level (quantity 0 removes it).
"""

import json
import threading
import time
from decimal import Decimal

import requests
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect


class StreamReader:
    """A WebSocket connection read by a thread: every text message, parsed, in ``messages``."""

    def __init__(self, url: str):
        self.connection = connect(url, open_timeout=10, max_size=2**24)
        self.messages: list[dict] = []
        self.closed_code: int | None = None
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for text in self.connection:
                with self.lock:
                    self.messages.append(json.loads(text))
        except ConnectionClosed:
            pass
        self.closed_code = self.connection.close_code

    def take(self) -> list[dict]:
        """The messages received since the last call."""
        with self.lock:
            taken, self.messages = self.messages, []
        return taken

    def wait_for(self, predicate, *, timeout: float = 30) -> list[dict]:
        """Every message received until one satisfies ``predicate`` (AssertionError after ``timeout`` s)."""
        seen: list[dict] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                while self.messages:
                    message = self.messages.pop(0)
                    seen.append(message)
                    if predicate(message):
                        return seen
            if self.closed_code is not None and not self.messages:
                break
            time.sleep(0.02)
        raise AssertionError(f"no matching message in {len(seen)} received: {seen[-3:]}")

    def close(self) -> None:
        self.connection.close()
        self.thread.join(timeout=10)


def rest_depth(web: str, symbol: str = "BTC-USDT") -> dict:
    response = requests.get(f"http://{web}/api/v1/markets/{symbol}/depth/", params={"limit": 1000}, timeout=30)
    response.raise_for_status()
    return response.json()


class Gap(AssertionError):
    """A depth event that does not continue the book."""


class LocalBook:
    """A book rebuilt from a REST snapshot and the depth stream; ``last_update_id`` is where it is."""

    def __init__(self):
        self.bids: dict[Decimal, Decimal] = {}
        self.asks: dict[Decimal, Decimal] = {}
        self.last_update_id: int | None = None
        self.buffer: list[dict] = []

    def on_event(self, event: dict) -> None:
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
        if event["u"] <= self.last_update_id:
            return
        if not event["U"] <= self.last_update_id + 1 <= event["u"]:
            raise Gap(f"event {event['U']}..{event['u']} after {self.last_update_id}")
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


def rest_levels(depth: dict) -> tuple[list, list]:
    return (
        [[Decimal(p), Decimal(q)] for p, q in depth["bids"]],
        [[Decimal(p), Decimal(q)] for p, q in depth["asks"]],
    )
