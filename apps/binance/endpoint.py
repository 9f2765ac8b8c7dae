"""What every ``/api/v3/`` endpoint does around its handler: weight, parameters, key, signature, errors.

An endpoint is a plain function ``handler(call) -> body`` registered per HTTP method with
:func:`endpoint`; :func:`route` turns a path's handlers into one Django view. In order, for
each request (Binance's spot API documentation, "General API information", "LIMITS",
"Endpoint security type"):

1. the query string and form body are parsed (-1101 duplicates, -1104 unknown names), and the request weight is
   counted against the client IP (429 -1003 past the limit; :data:`MALFORMED_WEIGHT` for one that cannot be parsed);
2. ``USER_STREAM`` needs a valid ``X-MBX-APIKEY``; ``TRADE`` and ``USER_DATA`` also a valid
   ``signature`` and ``timestamp`` (:mod:`apps.binance.signing`) and the key's scope
   (``trade`` for ``TRADE``, ``read`` for ``USER_DATA``): -2014 / -2015 / -1021 / -1022;
3. the handler runs; our services' errors become Binance's (:func:`apps.binance.errors.from_domain`),
   a lost database connection a 503 -1001, anything unexpected a logged 500 -1000.

Every answer is JSON (``{"code", "msg"}`` for errors) with ``X-MBX-USED-WEIGHT-1M``.
"""

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from apps.accounts.models import ApiKey
from apps.core.errors import DomainError
from exchange.client_ip import client_ip

from . import limits
from .errors import (
    BAD_API_KEY_FMT,
    DISCONNECTED,
    ILLEGAL_CHARS,
    NOT_FOUND,
    UNKNOWN,
    UNSUPPORTED_OPERATION,
    BinanceError,
    from_domain,
    rejected_key,
)
from .keys import key_authenticate, signing_secret
from .params import Params, pairs_of
from .signing import recv_window_check, recv_window_param, signature_check, signed_payload

log = logging.getLogger(__name__)

_SIGNED_PARAMS = ("timestamp", "recvWindow", "signature")


class Security(Enum):
    """Binance's endpoint security types: ``MARKET_DATA`` may send an API key (not checked); ``USER_STREAM``
    needs one; ``USER_DATA`` and ``TRADE`` need it and a signature."""

    NONE = "NONE"
    MARKET_DATA = "MARKET_DATA"
    USER_STREAM = "USER_STREAM"
    USER_DATA = "USER_DATA"
    TRADE = "TRADE"


# The scope of our API keys (API.md) each security type needs.
_SCOPES = {Security.USER_STREAM: "read", Security.USER_DATA: "read", Security.TRADE: "trade"}


@dataclass
class Call:
    """One request as a handler sees it: ``params``, the authenticated ``key`` (or None) and ``now_ms``."""

    request: HttpRequest
    params: Params
    now_ms: int
    key: ApiKey | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def user_id(self) -> int:
        return self.api_key.user_id

    @property
    def api_key(self) -> ApiKey:
        """The authenticated key; only for endpoints whose security needs one."""
        assert self.key is not None, "only for endpoints that need a key"
        return self.key


@dataclass(frozen=True)
class Endpoint:
    """A handler with its Binance weight (an int, or a function of the parameters), security and parameters."""

    handler: Callable[[Call], object]
    weight: int | Callable[[Params], int]
    security: Security
    params: tuple[str, ...]
    status: int = 200

    def weight_of(self, params: Params) -> int:
        return self.weight(params) if callable(self.weight) else self.weight


def endpoint(
    *, weight: int | Callable[[Params], int], security: Security = Security.NONE, params: tuple[str, ...] = ()
) -> Callable[[Callable[[Call], object]], Endpoint]:
    """Declare a handler's weight, security type and the parameters it reads (others are -1104)."""

    def wrap(handler: Callable[[Call], object]) -> Endpoint:
        names = params + (_SIGNED_PARAMS if security in (Security.USER_DATA, Security.TRADE) else ())
        return Endpoint(handler=handler, weight=weight, security=security, params=names)

    return wrap


def json_response(body: object, *, status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    response = HttpResponse(json.dumps(body, separators=(",", ":")), status=status, content_type="application/json")
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def error_response(error: BinanceError, headers: dict[str, str] | None = None) -> HttpResponse:
    return json_response(error.body(), status=error.status, headers={**(headers or {}), **error.headers})


def _body_text(request: HttpRequest) -> str:
    """The form body as sent (Binance takes ``application/x-www-form-urlencoded`` bodies), else empty. A body over
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is 413 -1100."""
    if request.method in ("GET", "HEAD"):
        return ""
    try:
        raw = request.body
    except RequestDataTooBig:
        raise BinanceError(ILLEGAL_CHARS, "The request body is too large.", status=413) from None
    if not raw:
        return ""
    content_type = request.content_type or "application/x-www-form-urlencoded"
    if content_type != "application/x-www-form-urlencoded":
        raise BinanceError(ILLEGAL_CHARS, "The body must be application/x-www-form-urlencoded.")
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise BinanceError(ILLEGAL_CHARS, "The body is not valid UTF-8.") from None


def _authenticate(call: Call, security: Security, query: str, body: str) -> None:
    raw_key = call.request.headers.get("X-MBX-APIKEY", "")
    if not raw_key or not raw_key.isascii() or not raw_key.isprintable() or len(raw_key) > 128:
        raise BinanceError(BAD_API_KEY_FMT, "API-key format invalid.", status=401)
    key = key_authenticate(raw_key, client_ip=client_ip(call.request))
    if security in (Security.USER_DATA, Security.TRADE):
        payload, signature = signed_payload(query_string=query, body=body)
        recv_window_check(
            timestamp=call.params.integer("timestamp"),
            recv_window=recv_window_param(call.params),
            now_ms=call.now_ms,
        )
        signature_check(secret=signing_secret(key), payload=payload, signature=signature)
    if _SCOPES[security] not in key.scopes:
        raise rejected_key()
    call.key = key


MALFORMED_WEIGHT = 1
"""The weight of a request whose query string or body cannot be read (its own weight may depend on what it says): a
malformed request is counted too, or a client could send them without limit (break-it review: 800 of them counted
nothing)."""


def _serve(request: HttpRequest, found: Endpoint, call_headers: dict[str, str]) -> HttpResponse:
    now = time.time()
    query = request.META.get("QUERY_STRING", "")
    try:
        body = _body_text(request)
        params = Params(pairs_of(query) + pairs_of(body))
    except BinanceError:
        call_headers.update(limits.weight_use(ip=client_ip(request), weight=MALFORMED_WEIGHT, now=now))
        raise
    call_headers.update(limits.weight_use(ip=client_ip(request), weight=found.weight_of(params), now=now))
    params.check_all_read(found.params)
    call = Call(request=request, params=params, now_ms=int(now * 1000), headers=call_headers)
    if found.security not in (Security.NONE, Security.MARKET_DATA):
        _authenticate(call, found.security, query, body)
    result = found.handler(call)
    return json_response(result, status=found.status, headers=call_headers)


def route(**handlers: Endpoint) -> Callable[[HttpRequest], HttpResponse]:
    """A Django view serving ``handlers`` by HTTP method (``GET=..., POST=...``); other methods are 405 -1099."""

    @csrf_exempt
    def view(request: HttpRequest) -> HttpResponse:
        found = handlers.get(request.method or "")
        if found is None:
            return error_response(BinanceError(NOT_FOUND, "Method not allowed on this path.", status=405))
        headers: dict[str, str] = {}
        try:
            return _serve(request, found, headers)
        except BinanceError as error:
            return error_response(error, headers)
        except DomainError as error:
            return error_response(from_domain(error), headers)
        except (OperationalError, InterfaceError) as error:
            log.warning("binance.database_unavailable error=%s", str(error).strip())
            unavailable = BinanceError(
                DISCONNECTED, "Internal error; unable to process your request. Please try again.", status=503
            )
            return error_response(unavailable, {**headers, "Retry-After": "1"})
        except Exception:
            log.exception("binance.internal_error path=%s", request.path)
            return error_response(
                BinanceError(UNKNOWN, "An unknown error occurred while processing the request.", status=500), headers
            )

    view.endpoints = handlers  # type: ignore[attr-defined]  # what the path serves, by method (tests list them)
    return view


@csrf_exempt
def not_found(request: HttpRequest, *args, **kwargs) -> HttpResponse:
    """Any other path under ``/api/v3/``: a 404 in Binance's shape, never HTML."""
    return error_response(BinanceError(NOT_FOUND, "Not found, unauthenticated, or unauthorized.", status=404))


@csrf_exempt
def unsupported(request: HttpRequest, *args, **kwargs) -> HttpResponse:
    """A Binance spot path we do not serve (order lists, cancel-replace, SOR, amendments), or any path of the other
    products' URL families README's CCXT configuration points at ``/not-served/`` (wallet, margin, futures): 400
    -1020, so that a bot learns the operation is unsupported rather than that the path does not exist
    (``exchangeInfo`` says so too: ``cancelReplaceAllowed``, ``ocoAllowed`` and the others are false). CCXT raises
    it as ``NotSupported`` or ``BadRequest``; a 404 page was ``ExchangeNotAvailable``, which bots retry as an outage."""
    return error_response(BinanceError(UNSUPPORTED_OPERATION, "This operation is not supported.", status=400))
