"""Binance's error shape and codes: HTTP status plus ``{"code": -NNNN, "msg": "..."}``.

Codes and messages follow Binance's spot API documentation ("Error codes"); clients such as
CCXT map them to their own exception classes by code and by message text, so both are kept
verbatim where Binance defines one. :func:`from_domain` translates our services' errors
(:class:`apps.core.errors.DomainError` codes of API.md) into the code Binance answers with
for the same situation.
"""

from apps.core.errors import DomainError


class BinanceError(Exception):
    """A refused ``/api/v3/`` request: nothing was written. ``status`` is the HTTP status."""

    def __init__(self, code: int, msg: str, *, status: int = 400, headers: dict[str, str] | None = None):
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.status = status
        self.headers = headers or {}

    def body(self) -> dict:
        return {"code": self.code, "msg": self.msg}


UNKNOWN = -1000
DISCONNECTED = -1001
UNAUTHORIZED = -1002
TOO_MANY_REQUESTS = -1003
TIMEOUT = -1007
TOO_MANY_ORDERS = -1015
UNSUPPORTED_OPERATION = -1020
INVALID_MESSAGE = -1013
UNKNOWN_ORDER_COMPOSITION = -1014
INVALID_TIMESTAMP = -1021
INVALID_SIGNATURE = -1022
NOT_FOUND = -1099
ILLEGAL_CHARS = -1100
TOO_MANY_PARAMETERS = -1101
MANDATORY_PARAM_EMPTY_OR_MALFORMED = -1102
UNREAD_PARAMETERS = -1104
PARAM_NOT_REQUIRED = -1106
BAD_PRECISION = -1111
INVALID_TIF = -1115
INVALID_ORDER_TYPE = -1116
INVALID_SIDE = -1117
BAD_INTERVAL = -1120
BAD_SYMBOL = -1121
INVALID_LISTEN_KEY = -1125
MORE_THAN_XX_HOURS = -1127
INVALID_PARAMETER = -1130
BAD_RECV_WINDOW = -1131
NEW_ORDER_REJECTED = -2010
CANCEL_REJECTED = -2011
NO_SUCH_ORDER = -2013
BAD_API_KEY_FMT = -2014
REJECTED_MBX_KEY = -2015


def mandatory(name: str) -> BinanceError:
    return BinanceError(
        MANDATORY_PARAM_EMPTY_OR_MALFORMED, f"Mandatory parameter '{name}' was not sent, was empty/null, or malformed."
    )


def illegal(name: str, legal: str) -> BinanceError:
    return BinanceError(ILLEGAL_CHARS, f"Illegal characters found in parameter '{name}'; legal range is '{legal}'.")


def invalid_value(name: str) -> BinanceError:
    return BinanceError(INVALID_PARAMETER, f"Invalid data sent for a parameter '{name}'.")


def status_unknown() -> BinanceError:
    """-1007 (HTTP 504): the order or cancel was handed to the engine but its outcome did not arrive in time.

    Binance's words for it; clients read it as "do not assume it failed" (CCXT raises ``RequestTimeout``,
    not ``InvalidOrder``): the command stays queued and is applied once, so the caller queries the order
    (``GET /api/v3/order`` with ``origClientOrderId``) or retries with the same ``newClientOrderId``.
    """
    return BinanceError(
        TIMEOUT,
        "Timeout waiting for response from backend server. Send status unknown; execution status unknown.",
        status=504,
    )


def rejected_key() -> BinanceError:
    return BinanceError(REJECTED_MBX_KEY, "Invalid API-key, IP, or permissions for action.", status=401)


# Our order rejections (API.md codes) and the filter Binance names for each field.
_FILTER_OF_FIELD = {"price": "PRICE_FILTER", "qty": "LOT_SIZE", "quote_qty": "NOTIONAL"}
_ORDER_REJECTIONS = {
    "insufficient_funds": "Account has insufficient balance for requested action.",
    "post_only_would_take": "Order would immediately match and take.",
    "market_halted": "Market is closed.",
    "fok_not_fillable": "Order would not be filled completely (FOK): rejected, nothing held.",
    "idempotency_conflict": "Duplicate order sent.",
}


def from_domain(error: DomainError, *, placing: bool = False) -> BinanceError:
    """The Binance error for one of our services' errors; ``placing`` is true on order placement.

    Filter failures (tick, step, quantity limits, notional) are -1013 ``Filter failure: <FILTER>``
    (more decimals than the asset allows is caught before, by :mod:`apps.binance.params`: -1111); rejections of a well-formed order (funds,
    post-only, halted market, fill-or-kill, a reused client order id) are -2010 with Binance's
    message; an unknown order is -2013; anything else the service judged malformed is -1102
    on placement (-2010) or -1130 elsewhere, with the service's message.
    """
    field = next(iter(error.fields), "")
    if error.code == "order_status_unknown":
        return status_unknown()
    if error.code in ("invalid_price", "invalid_quantity"):
        filter_name = _FILTER_OF_FIELD.get(field, "LOT_SIZE")
        return BinanceError(INVALID_MESSAGE, f"Filter failure: {filter_name}")
    if error.code in ("min_notional", "max_notional"):
        return BinanceError(INVALID_MESSAGE, "Filter failure: NOTIONAL")
    if error.code in _ORDER_REJECTIONS:
        return BinanceError(NEW_ORDER_REJECTED, _ORDER_REJECTIONS[error.code])
    if error.code == "not_found":
        if field == "market":
            return BinanceError(BAD_SYMBOL, "Invalid symbol.")
        return BinanceError(NO_SUCH_ORDER, "Order does not exist.")
    if error.code == "invalid_state":
        return BinanceError(CANCEL_REJECTED, "Unknown order sent.")
    if error.code == "unavailable":
        return BinanceError(
            DISCONNECTED, "Internal error; unable to process your request. Please try again.", status=503
        )
    if placing:
        return BinanceError(NEW_ORDER_REJECTED, error.message)
    return BinanceError(INVALID_PARAMETER, error.message)
