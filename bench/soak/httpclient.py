"""The clients' HTTP: a definite answer, a session that retries like a careful client, and the outcome counters."""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .common import HTTP_TIMEOUT, RETRY_WINDOW


@dataclass
class Answer:
    """A definite HTTP answer (anything but a connection error, timeout, 5xx, 429 or 409 ``idempotency_key_in_use``)."""

    status: int
    body: Any  # the decoded JSON (any shape the endpoint returns) or the text of a non-JSON answer
    attempts: int
    replayed: bool = False
    location: str = ""

    @property
    def ok(self) -> bool:
        """Answered 2xx."""
        return 200 <= self.status < 300

    @property
    def code(self) -> str:
        """The API's error code (``insufficient_funds`` ...), or the status as text."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return str(self.body["error"].get("code"))
        return str(self.status)


class Http:
    """A requests session that retries like a careful client: the same request again after a connection
    error, a timeout, a 5xx or a 429, with back-off, for up to ``RETRY_WINDOW`` seconds."""

    def __init__(self, base_url: str, stats: Counter, rng: random.Random, drop_rate: float = 0.0):
        import requests

        self.base_url, self.stats, self.rng, self.drop_rate = base_url, stats, rng, drop_rate
        self.session = requests.Session()

    def call(
        self,
        method: str,
        path: str,
        *,
        json_body=None,
        data: bytes | dict | None = None,
        headers: dict | None = None,
        window: float = RETRY_WINDOW,
        on_response=None,
    ) -> Answer | None:
        """Send the request until a definite answer; ``None`` when none came within ``window`` seconds.

        Redirects are not followed. ``on_response(response)`` sees every response (cookies).
        """
        import requests

        deadline = time.monotonic() + window
        attempt = 0
        while True:
            attempt += 1
            self.stats["requests"] += 1
            timeout: float | tuple[float, float] = HTTP_TIMEOUT
            if method != "GET" and attempt == 1 and self.rng.random() < self.drop_rate:
                timeout = (HTTP_TIMEOUT, 0.001)  # the request goes out, its answer is lost: the client times out
                self.stats["answers_dropped"] += 1
            try:
                response = self.session.request(
                    method,
                    self.base_url + path,
                    json=json_body,
                    data=data,
                    headers=headers,
                    timeout=timeout,
                    allow_redirects=False,
                )
            except requests.RequestException:
                self.stats["connection_errors"] += 1
            else:
                if on_response is not None:
                    on_response(response)
                if _in_use(response):
                    self.stats["key_in_use"] += 1  # an earlier attempt is still being processed: ask again later
                elif response.status_code < 500 and response.status_code != 429:
                    if attempt > 1:
                        self.stats["retried_operations"] += 1
                    replayed = response.headers.get("Idempotent-Replayed") == "true"
                    self.stats["idempotent_replays"] += replayed
                    return Answer(
                        response.status_code, _body(response), attempt, replayed, response.headers.get("Location", "")
                    )
                else:
                    self.stats["server_errors" if response.status_code >= 500 else "rate_limited"] += 1
            if time.monotonic() > deadline:
                self.stats["gave_up"] += 1
                return None
            time.sleep(min(0.1 * 2**attempt, 2.0) * self.rng.uniform(0.5, 1.0))


def _in_use(response) -> bool:
    """Whether ``response`` is 409 ``idempotency_key_in_use``: the same request, sent before, is still being
    processed (API.md); its answer comes to a later retry."""
    if response.status_code != 409:
        return False
    body = _body(response)
    return isinstance(body, dict) and body.get("error", {}).get("code") == "idempotency_key_in_use"


def _body(response):
    if "json" in response.headers.get("Content-Type", ""):
        try:
            return response.json()
        except ValueError:
            return None
    return response.text


class Outcomes:
    """What one client attempted, and what it was told: per kind, attempted, acknowledged, refused, unknown."""

    def __init__(self):
        self.attempted: Counter = Counter()
        self.acknowledged: Counter = Counter()
        self.refused: Counter = Counter()
        self.unknown: Counter = Counter()
        self.refusal_codes: Counter = Counter()

    def record(self, kind: str, answer: Answer | None) -> str:
        """Count one operation of ``kind``; return ``acknowledged``, ``refused`` or ``unknown``."""
        if answer is None:
            return self.count(kind, "unknown")
        if answer.ok:
            return self.count(kind, "acknowledged")
        return self.count(kind, "refused", answer.code)

    def count(self, kind: str, outcome: str, code: str = "") -> str:
        """Count one operation of ``kind`` with that ``outcome`` (and refusal ``code``); return the outcome."""
        self.attempted[kind] += 1
        getattr(self, outcome)[kind] += 1
        if outcome == "refused":
            self.refusal_codes[f"{kind}:{code}"] += 1
        return outcome

    def as_dict(self) -> dict:
        """The counters as plain dictionaries."""
        return {
            name: dict(getattr(self, name))
            for name in ("attempted", "acknowledged", "refused", "unknown", "refusal_codes")
        }
