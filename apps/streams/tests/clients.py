"""Clients of the live servers for the streams' tests: a WebSocket reader, the REST depth."""

import contextlib
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
        self._stack = contextlib.ExitStack()
        self.connection = self._stack.enter_context(connect(url, open_timeout=10, max_size=2**24))
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
        self._stack.close()
        self.thread.join(timeout=10)


def rest_depth(web: str, symbol: str = "BTC-USDT") -> dict:
    response = requests.get(f"http://{web}/api/v1/markets/{symbol}/depth/", params={"limit": 1000}, timeout=30)
    response.raise_for_status()
    return response.json()


def rest_levels(depth: dict) -> tuple[list, list]:
    return (
        [[Decimal(p), Decimal(q)] for p, q in depth["bids"]],
        [[Decimal(p), Decimal(q)] for p, q in depth["asks"]],
    )
