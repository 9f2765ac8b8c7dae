"""The custody webhook, ``POST /custody/callbacks/`` (API.md "Custody webhook").

The body is authenticated (signature and timestamp skew, by the custody adapter), validated
and stored in the inbox, and committed, before the 200; processing follows on a Celery
worker. 401: bad signature or stale timestamp; 400: malformed body; 413 ``payload_too_large``: body too large;
409: a known event id with other content; 503 (``Retry-After: 1``): the database cannot be reached. Nothing is stored
when it is refused; a signed callback refused (400, 409) is logged at WARNING with its event id and reasons.
"""

import json
import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from apps.core.errors import DomainError

from . import services
from .custody import get_adapter
from .custody.base import CallbackUnauthenticated
from .errors import CallbackRefused, PayloadTooLarge

log = logging.getLogger(__name__)


def error_response(error: DomainError) -> JsonResponse:
    """API.md's error body: ``{"error": {"code", "message", "fields"}}`` with the error's HTTP status."""
    body = {"error": {"code": error.code, "message": error.message, "fields": error.fields}}
    return JsonResponse(body, status=error.status)


def _too_large() -> JsonResponse:
    limit = settings.CUSTODY_WEBHOOK_MAX_BODY
    return error_response(PayloadTooLarge(f"The body is larger than {limit} bytes."))


def _event_id(body: bytes) -> str:
    """The ``event_id`` a callback body names, as ASCII (``-`` when it names none), for the log."""
    try:
        event_id = json.loads(body).get("event_id")
    except (ValueError, AttributeError, RecursionError):
        return "-"
    return ascii(event_id)[:200] if event_id is not None else "-"


@csrf_exempt
@require_POST
def custody_callback(request):
    """Authenticate, validate and store one custody callback; 200 once stored (duplicates too)."""
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > settings.CUSTODY_WEBHOOK_MAX_BODY:
        return _too_large()
    try:
        body = request.body
    except RequestDataTooBig:
        return _too_large()
    if len(body) > settings.CUSTODY_WEBHOOK_MAX_BODY:
        return _too_large()
    try:
        get_adapter().verify_callback(headers=request.headers, body=body)
    except CallbackUnauthenticated as exc:
        return error_response(CallbackRefused(str(exc)))
    try:
        event, created = services.custody_event_receive(body=body)
    except DomainError as exc:
        # Signed by custody yet refused: custody will send it again and again, and nothing is stored, so the log is
        # where an operator finds it (break-it review: a deposit amount with more decimals than the asset's).
        log.warning(
            "custody.callback_refused event_id=%s code=%s message=%s fields=%s",
            _event_id(body),
            exc.code,
            exc.message,
            json.dumps(exc.fields, ensure_ascii=True),
        )
        return error_response(exc)
    except (OperationalError, InterfaceError) as exc:  # the database is unreachable: nothing stored, send it again
        log.warning("custody.callback_database_unavailable error=%s", str(exc).strip())
        unavailable = {"code": "unavailable", "message": "Briefly unavailable: send the callback again.", "fields": {}}
        return JsonResponse({"error": unavailable}, status=503, headers={"Retry-After": "1"})
    return JsonResponse({"event_id": event.event_id, "status": "stored" if created else "duplicate"})
