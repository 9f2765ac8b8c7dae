"""One exception handler: every API error has the shape of API.md.

``{"error": {"code": "<code>", "message": "...", "fields": {"<field>": "<message>"}}}``
"""

import logging
import re

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import set_rollback

from apps.core.errors import DomainError

log = logging.getLogger(__name__)


class PayloadTooLarge(exceptions.APIException):
    """A request body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes: 413 ``payload_too_large``."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "payload_too_large"


class UnknownField(DomainError):
    """A body field the endpoint does not take (400 ``unknown_field``, each named in ``fields``).

    Refused rather than ignored, so that ``{"timeInForce": "IOC", "postOnly": true}`` (another API's
    names) cannot place a resting GTC order the caller did not mean; nothing is written.
    """

    code = "unknown_field"

    def __init__(self, names):
        names = sorted(set(names))
        noun = "field" if len(names) == 1 else "fields"
        shown = ", ".join(names)
        super().__init__(
            f"Unknown {noun}: {shown[:200]}{'...' if len(shown) > 200 else ''}.",
            fields=dict.fromkeys(names, "Unknown field."),
        )


_CODES = {
    PayloadTooLarge: "payload_too_large",
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "not_authenticated",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.Throttled: "rate_limited",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
}


_SURROGATE = re.compile("[\ud800-\udfff]")


def _shown(text: str) -> str:
    """``text`` with each lone surrogate (JSON's ``"\\ud800"``, which no UTF-8 answer can carry) as U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def error_body(code: str, message: str, fields: dict | None = None) -> dict:
    """The API's error shape (the module). A message or field that repeats the request's bad value may hold a lone
    surrogate: shown as U+FFFD (break-it review: encoding the answer failed, a 500)."""
    shown = {_shown(name): _shown(text) if isinstance(text, str) else text for name, text in (fields or {}).items()}
    return {"error": {"code": code, "message": _shown(message), "fields": shown}}


def _flatten(detail) -> dict[str, str]:
    """DRF validation details as ``{field: first message}``; nested fields joined with dots."""
    if isinstance(detail, list):
        return {"non_field_errors": str(detail[0])} if detail else {}
    fields = {}
    for name, value in detail.items():
        if isinstance(value, dict):
            fields.update({f"{name}.{inner}": message for inner, message in _flatten(value).items()})
        elif isinstance(value, list) and value:
            first = value[0]
            fields[name] = str(first) if not isinstance(first, dict) else next(iter(_flatten(first).values()), "")
        else:
            fields[name] = str(value)
    return fields


def exception_handler(exc, context):
    """Map domain errors and DRF's exceptions to the API error shape.

    A lost database connection is a 503 with ``Retry-After`` (the request wrote nothing and can
    be retried, with its ``Idempotency-Key``); anything else unexpected is logged with its
    traceback and answered as a JSON 500 ``internal_error``.
    """
    if isinstance(exc, DomainError):
        set_rollback()
        return Response(
            error_body(exc.code, exc.message, exc.fields), status=exc.status, headers=getattr(exc, "headers", None)
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.ValidationError):
        set_rollback()
        fields = _flatten(exc.detail)
        message = "; ".join(f"{name}: {text}" for name, text in fields.items()) or "Invalid request."
        return Response(error_body("invalid_request", message, fields), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, exceptions.APIException):
        set_rollback()
        headers = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
        code = next((code for cls, code in _CODES.items() if isinstance(exc, cls)), "invalid_request")
        return Response(error_body(code, str(exc.detail)), status=exc.status_code, headers=headers)
    set_rollback()
    if isinstance(exc, (OperationalError, InterfaceError)):
        log.warning("api.database_unavailable error=%s", str(exc).strip())
        return Response(
            error_body("unavailable", "The service is briefly unavailable: retry the request."),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "1"},
        )
    log.exception("api.internal_error view=%s", type(context.get("view")).__name__)
    return Response(
        error_body("internal_error", "An unexpected error occurred; it has been logged."),
        status=status.HTTP_500_INTERNAL_SERVER_ERROR,
    )
