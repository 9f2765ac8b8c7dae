"""Signed requests (Binance's SIGNED endpoints): HMAC-SHA256 over the exact parameters as sent.

Binance's rule ("SIGNED endpoint security"): ``signature`` is the hex HMAC-SHA256, keyed with
the API key's secret, of ``totalParams``, the query string concatenated with the request body,
each exactly as sent (percent-encoding included) with the ``signature`` parameter itself left
out. ``timestamp`` (milliseconds since the epoch) must be less than 1 s ahead of the server's
clock and at most ``recvWindow`` ms (default 5000, at most 60000, with up to three decimals: microseconds) behind
it: a captured request replayed after its window is refused (-1021). The comparison is constant-time.
"""

import hashlib
import hmac
import re
from decimal import Decimal

from .errors import BAD_RECV_WINDOW, INVALID_SIGNATURE, INVALID_TIMESTAMP, BinanceError, illegal, mandatory

DEFAULT_RECV_WINDOW_MS = 5000
MAX_RECV_WINDOW_MS = 60000
MAX_AHEAD_MS = 1000

_SIGNATURE = re.compile(r"[0-9a-fA-F]{64}")


def _without_signature(raw: str) -> tuple[str, list[str]]:
    """``raw`` with its ``signature=...`` parameters removed (the rest byte for byte), and their values."""
    kept, signatures = [], []
    for part in raw.split("&") if raw else []:
        if part.startswith("signature="):
            signatures.append(part[len("signature=") :])
        else:
            kept.append(part)
    return "&".join(kept), signatures


def signed_payload(*, query_string: str, body: str) -> tuple[str, str]:
    """``(totalParams, signature)`` of a request; -1102 without exactly one well-formed ``signature``."""
    query, in_query = _without_signature(query_string)
    form, in_body = _without_signature(body)
    signatures = in_query + in_body
    if len(signatures) != 1 or not signatures[0]:
        raise mandatory("signature")
    if not _SIGNATURE.fullmatch(signatures[0]):
        raise BinanceError(INVALID_SIGNATURE, "Signature for this request is not valid.")
    return query + form, signatures[0]


def signature_check(*, secret: str, payload: str, signature: str) -> None:
    """-1022 unless ``signature`` is the hex HMAC-SHA256 of ``payload`` under ``secret`` (case-insensitive hex)."""
    expected = hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature.lower()):
        raise BinanceError(INVALID_SIGNATURE, "Signature for this request is not valid.")


_RECV_WINDOW = re.compile(r"[0-9]{1,18}(\.[0-9]{1,3})?")
_RECV_WINDOW_RANGE = f"0.001..{MAX_RECV_WINDOW_MS}, at most three decimals"


def recv_window_param(params) -> Decimal | None:
    """``recvWindow`` of ``params`` (:class:`~apps.binance.params.Params`) in ms, ``None`` when absent: a whole number
    or one with up to three decimals (Binance: "recvWindow ... supports up to three decimal places of precision
    (e.g., 6000.346) so that microseconds may be specified"; break-it review: 5000.5 was refused); -1100 otherwise."""
    value = params.raw("recvWindow")
    if value is None:
        return None
    if not _RECV_WINDOW.fullmatch(value):
        raise illegal("recvWindow", _RECV_WINDOW_RANGE)
    return Decimal(value)


def recv_window_check(*, timestamp: int | None, recv_window: Decimal | int | None, now_ms: int) -> None:
    """-1102 without ``timestamp``; -1131 for a ``recvWindow`` above 60000; -1021 outside the window.

    Accepted when ``timestamp < now + 1000`` and ``now - timestamp <= recvWindow``.
    """
    if timestamp is None:
        raise mandatory("timestamp")
    window = DEFAULT_RECV_WINDOW_MS if recv_window is None else recv_window
    if window > MAX_RECV_WINDOW_MS:
        raise BinanceError(BAD_RECV_WINDOW, f"recvWindow must be less than {MAX_RECV_WINDOW_MS}.")
    if window <= 0:
        raise illegal("recvWindow", _RECV_WINDOW_RANGE)
    if timestamp >= now_ms + MAX_AHEAD_MS:
        raise BinanceError(INVALID_TIMESTAMP, "Timestamp for this request was 1000ms ahead of the server's time.")
    if now_ms - timestamp > window:
        raise BinanceError(INVALID_TIMESTAMP, "Timestamp for this request is outside of the recvWindow.")
