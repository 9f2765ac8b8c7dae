"""``Idempotency-Key`` on POST: the same key and body returns the original response (API.md).

The key is claimed with ``INSERT ... ON CONFLICT DO NOTHING`` in the same transaction as the POST's effect; a
failed POST stores nothing and may be retried with the same key. A duplicate sent while the first request is
still being processed is refused at once with 409 ``idempotency_key_in_use`` (draft-ietf-httpapi-idempotency-
key-header-07, "Error Scenarios": a retry while the original request is still being processed is a 409; Stripe
answers the same). It holds no connection waiting for the first, which can take ``ORDERS_ENGINE_WAIT_SECONDS``
when the matching engine is down and then do the same wait again once that failed: a client retrying on a short
timeout queued its duplicates one behind the other until the server ran out of database connections (break-it
review).
"""

import hashlib
import json
from collections.abc import Callable

from django.db import connection, transaction
from rest_framework.response import Response

from apps.core.errors import DomainError
from apps.ledger.errors import IdempotencyConflict
from apps.ledger.transactions import retrying_atomic

from .models import IdempotencyRecord

HEADER = "Idempotency-Key"

_IN_USE = "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))"
"""Take the key's lock for the claiming transaction, or answer false at once when another request holds it."""


class IdempotencyKeyInUse(DomainError):
    """Another request with this ``Idempotency-Key`` is still being processed: nothing was done; retry later to
    get its answer (409 ``idempotency_key_in_use``)."""

    code = "idempotency_key_in_use"
    status = 409


_CLAIM = """
    INSERT INTO api_idempotencyrecord (user_id, key, request_hash, created_at)
    VALUES (%s, %s, %s, now())
    ON CONFLICT (user_id, key) DO NOTHING
    RETURNING id
"""


def idempotent(request, perform: Callable[[], Response], *, check: Callable[[], None] | None = None) -> Response:
    """Run ``perform`` (a POST's effect, returning its response) at most once per user and ``Idempotency-Key``.

    ``check`` (a second factor's code, verified outside the transaction so that a wrong one counts) runs first,
    unless the request replays a stored answer: a retry with the same key and body is answered as the first was,
    without checking again the one-time code that the first request used up. Without the header, ``check`` and
    ``perform`` run once, ``perform`` in a retrying transaction. Raises :class:`IdempotencyConflict` (409) when the
    key was used for a different request, :class:`IdempotencyKeyInUse` (409) while a request with the key is still
    being processed, :class:`DomainError` for a malformed key, and what ``check`` raises.
    """
    key = request.headers.get(HEADER)
    if key is None:
        if check is not None:
            check()
        return retrying_atomic(perform)()
    if not 1 <= len(key) <= 255 or not key.isprintable():
        raise DomainError("Idempotency-Key must be 1 to 255 printable characters.", fields={HEADER: "Invalid key."})
    fingerprint = json.dumps(
        {"method": request.method, "path": request.path, "body": request.data}, sort_keys=True, default=str
    )
    request_hash = hashlib.sha256(fingerprint.encode()).hexdigest()
    if check is not None:
        stored = IdempotencyRecord.objects.filter(user_id=request.user.id, key=key).first()
        if stored is None or stored.status_code is None:  # new, or its first request still running
            check()
    return _claim_and_perform(request.user.id, key, request_hash, perform)


def secret_shown_once(request) -> None:
    """Refuse ``Idempotency-Key`` on a POST whose answer shows a secret only once (an API key and its signing
    secret, a stream key, an authenticator's secret, recovery codes): replaying that answer would mean storing the
    secret. 400 ``invalid_request`` naming the header, before anything is read or written; without the header, a
    retry creates a new secret (API.md)."""
    if HEADER in request.headers:
        raise DomainError(
            "Idempotency-Key is not taken here: the answer shows a secret once and is never stored to replay; "
            "send the request without it (a retry makes a new one).",
            fields={HEADER: "Not taken by this endpoint."},
        )


@retrying_atomic
def _claim_and_perform(user_id: int, key: str, request_hash: str, perform: Callable[[], Response]) -> Response:
    # The inner block undoes the claim with a failed request even inside a caller's transaction.
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(_IN_USE, [f"idempotency-key:{user_id}:{key}"])
            if not cursor.fetchone()[0]:
                raise IdempotencyKeyInUse(
                    "A request with this Idempotency-Key is still being processed; retry it later for its answer.",
                    fields={HEADER: "In use."},
                )
            cursor.execute(_CLAIM, [user_id, key, request_hash])
            claimed = cursor.fetchone()
        if claimed is None:
            record = IdempotencyRecord.objects.get(user_id=user_id, key=key)
            if record.request_hash != request_hash:
                raise IdempotencyConflict(
                    "This Idempotency-Key was used for a different request.", fields={HEADER: "Used."}
                )
            return Response(record.response_body, status=record.status_code, headers={"Idempotent-Replayed": "true"})
        response = perform()
        IdempotencyRecord.objects.filter(id=claimed[0]).update(
            status_code=response.status_code, response_body=json.loads(json.dumps(response.data, default=str))
        )
        return response
