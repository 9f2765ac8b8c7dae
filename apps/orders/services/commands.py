"""The public placement and cancel services: run inline, or handed to the market's sequencer.

``settings.ORDERS_ENGINE`` chooses (DESIGN.md section 7, "The sequencer"):

- ``"inline"`` (tests, tiny installs): :func:`order_place` and the cancels (:func:`order_cancel`,
  :func:`order_cancel_by_client_id`, :func:`open_orders_cancel`) run the
  placement (:func:`apps.orders.services.placement.order_place`) or cancel in the caller's
  process and transaction, under the market row lock: the same code a sequencer runs for each
  command of its batch.
- ``"sequencer"``: the caller writes a durable :class:`~apps.orders.models.Command` (committed
  on its own connection, so it survives the caller's transaction and any process dying; then it
  rings the market's sequencer, :mod:`apps.core.doorbell`) and waits for the outcome the sequencer
  (``manage.py run_engine``) stores in the same commit as the batch and then publishes
  (:mod:`apps.orders.services.answers`: Redis pub/sub on the reply channel of the caller's thread,
  subscribed once per thread and named by the command, ``reply_to``; with reads of the stored
  outcome as the safety net: every second, every 0.1 s when Redis cannot be reached), then returns
  what the inline call would have returned, or raises the same error.
  The queue and the outcomes stay in PostgreSQL, durable and transactional: a command written
  is never lost with a broker, and only the wake-up goes through Redis. With no outcome within
  ``settings.ORDERS_ENGINE_WAIT_SECONDS`` the caller gets :class:`OrderStatusUnknown` (504),
  never a guess; the command stays queued and is applied once.

Idempotency across retries and restarts: ``client_order_id`` is unique per user on the order
itself (a replay returns the original order, whichever process applies it); an
``idempotency_key`` (the API's ``Idempotency-Key``) is unique per user on the command, so a
retry under it finds the first command and its outcome instead of queueing another (while that command is
pending, the retry reads its outcome from the database every 0.1 s: the answer goes to the first caller's channel).
"""

import hashlib
import importlib
import json
import logging
import threading
import time
import uuid
from decimal import Decimal
from typing import Any

import psycopg
import redis
from django.conf import settings
from django.db import connection, transaction

from apps.core import doorbell
from apps.core.errors import DomainError, NotFound
from apps.core.reasons import reason_checked
from apps.ledger.errors import IdempotencyConflict

from ..errors import OrderStatusUnknown
from ..models import CommandKind, Market, Order, OrderStatus, OrderType
from ..store import commands as queue
from ..store import orders as order_rows
from . import answers, cancel, placement

log = logging.getLogger(__name__)

NO_LISTENER_POLL_SECONDS = 0.1
"""How often a caller reads its command's status from the database when Redis cannot be reached."""

_local = threading.local()


def _queue_connection() -> psycopg.Connection:
    """This thread's own autocommit connection to the database, for submitting commands and reading their status."""
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed or conn.broken:
        skip = {"cursor_factory", "context", "prepare_threshold"}
        params = {k: v for k, v in connection.get_connection_params().items() if k not in skip}
        conn = _local.conn = psycopg.connect(autocommit=True, **params)
    return conn


def queue_connection_close() -> None:
    """Close this thread's command connection, if open (tests; threads that end)."""
    conn = getattr(_local, "conn", None)
    if conn is not None:
        conn.close()
        _local.conn = None


def _one(row: tuple | None) -> tuple:
    """The row a statement that always returns one returned."""
    if row is None:
        raise RuntimeError("the command queue returned no row")
    return row


def _jsonable(name: str, value):
    """``value`` as the command's ``jsonb`` payload holds it; a string ``jsonb`` cannot store (a NUL, a lone
    surrogate: never a valid amount, symbol or id) is a :class:`DomainError` naming ``name``, before anything
    is queued, instead of the database's error."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, str):
        if "\x00" in value:
            raise DomainError("Null characters are not allowed.", fields={name: "Null characters are not allowed."})
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise DomainError("Not a valid string.", fields={name: "Not a valid string."}) from None
    return value


def _payload_checked(payload: dict) -> dict:
    """``payload`` as the command's ``jsonb`` holds it (:func:`_jsonable` of each value)."""
    return {name: _jsonable(name, value) for name, value in payload.items()}


def command_submit(
    *, market: str, kind: str, user_id: int, payload: dict, key: str = "", wait_seconds: float | None = None
) -> dict:
    """Queue a command for the sequencer of ``market`` (a symbol) and wait for its outcome, at most
    ``wait_seconds`` (by default ``settings.ORDERS_ENGINE_WAIT_SECONDS``; 0: only read it once).

    Returns the outcome (``{"order_id": n}`` or ``{"error": {...}}``; when published, an outcome naming an order
    also carries its row, ``"order"``, see :data:`apps.orders.store.commands.MARK_DONE`). A ``key`` already used by
    the user returns (or waits for) that command's outcome when the request is the same, and raises
    :class:`IdempotencyConflict` when it differs. A placement whose ``client_order_id`` another request of the
    user's has queued returns (or waits for) that one's outcome when it is the same request; when it differs, it
    waits (within its wait) for the queued one to be applied and is then submitted again, for the sequencer to judge
    against the stored order (the same order: that order; another one: a conflict naming the field), and is that
    conflict when the queued one is still pending at the end of its wait.

    Raises :class:`DomainError` naming the field for a payload string ``jsonb`` cannot hold (a NUL, a lone
    surrogate), :class:`NotFound` (no such market) and :class:`OrderStatusUnknown` (no outcome within the wait).
    """
    payload = _payload_checked(payload)
    request_hash = hashlib.sha256(json.dumps([kind, market, payload], sort_keys=True).encode()).hexdigest()
    listening = _listening()  # subscribed before the command exists, so its answer cannot be published unheard
    token = uuid.uuid4().hex
    params = {
        "symbol": market,
        "kind": kind,
        "user_id": user_id,
        "key": key,
        "request_hash": request_hash,
        "token": token,
        "reply_to": listening.channel if listening is not None else "",
        "payload": json.dumps(payload),
    }
    for attempt in (1, 2):
        conn = _queue_connection()
        try:
            market_id, command_id = _one(conn.execute(queue.SUBMIT, params).fetchone())
            break
        except psycopg.OperationalError:
            # A connection terminated while idle (a database restart, a failover) fails on first use; the same
            # token again is safe: if the first INSERT did land, the second one finds it.
            queue_connection_close()
            if attempt == 2:
                raise
        except BaseException:
            queue_connection_close()  # the next call starts on a new connection
            raise
    if market_id is None:
        raise NotFound(f"No market {market}.", fields={"market": "No such market."})
    if command_id is not None:
        doorbell.ring(queue.engine_channel(market_id))  # committed (autocommit): the sequencer reads it now
    if command_id is None:  # sent before (this token), its key used, or its client order id queued: that one answers
        existing = conn.execute(queue.BY_TOKEN, [token]).fetchone()
        if existing is None and key:
            existing = conn.execute(queue.BY_KEY, [user_id, key]).fetchone()
        client_order_id = payload.get("client_order_id") if kind == CommandKind.PLACE else None
        queued_id = existing is None and bool(client_order_id)
        if queued_id:
            existing = conn.execute(queue.BY_PENDING_CLIENT_ORDER_ID, [user_id, client_order_id]).fetchone()
            if existing is None:  # applied since it blocked this one: submit again, the sequencer judges the reuse
                return command_submit(
                    market=market, kind=kind, user_id=user_id, payload=payload, key=key, wait_seconds=wait_seconds
                )
        token, reply_to, first_hash, outcome = _one(existing)
        if first_hash != request_hash and queued_id:
            # Another request under this client order id is queued; the order it names may already exist as this
            # request asks (an exact retry that arrived behind a different request with the same id): once the
            # queued one is applied, the sequencer judges this one against the stored order.
            started, seconds = time.monotonic(), _wait_seconds(wait_seconds)
            try:
                _wait(None, token, seconds)  # its answer goes to its own caller: read from the database
            except OrderStatusUnknown:
                raise IdempotencyConflict(
                    f"client_order_id {client_order_id!r} was already used for another order.",
                    fields={"client_order_id": "Already used for another order."},
                ) from None
            left = max(0.0, seconds - (time.monotonic() - started))
            return command_submit(
                market=market, kind=kind, user_id=user_id, payload=payload, key=key, wait_seconds=left
            )
        if first_hash != request_hash:
            raise IdempotencyConflict(
                "This Idempotency-Key was used for a different request.", fields={"Idempotency-Key": "Used."}
            )
        if outcome is not None:
            return outcome
        if listening is not None and reply_to != listening.channel:
            listening = None  # the first command's answer goes to its own caller: this one reads the database
    return _wait(listening, token, _wait_seconds(wait_seconds))


def _wait_seconds(wait_seconds: float | None) -> float:
    """A caller's wait: ``wait_seconds``, or ``settings.ORDERS_ENGINE_WAIT_SECONDS`` when not given."""
    return settings.ORDERS_ENGINE_WAIT_SECONDS if wait_seconds is None else wait_seconds


def _listening() -> answers.Listener | None:
    """This thread's listener (:func:`apps.orders.services.answers.listener`); ``None`` when Redis is unreachable
    (the caller then reads the outcome from the database, :func:`_wait`)."""
    try:
        return answers.listener()
    except redis.RedisError:
        log.warning("engine.answers_unavailable", exc_info=True)
        answers.listener_close()
        return None


def _status(token: str) -> dict | None:
    """The command ``token``'s outcome in the database, ``None`` while pending or when the database cannot be
    reached (the connection is replaced at the next call)."""
    try:
        _, outcome = _one(_queue_connection().execute(queue.STATUS, [token]).fetchone())
    except psycopg.OperationalError:
        queue_connection_close()
        return None
    return outcome


def _wait(listening: answers.Listener | None, token: str, seconds: float) -> dict:
    """The outcome of the command ``token`` within ``seconds``: published to
    ``listening`` (:mod:`apps.orders.services.answers`: the command's ``reply_to`` is its channel), or read from
    the database every :data:`~apps.orders.services.answers.POLL_SECONDS` (every ``NO_LISTENER_POLL_SECONDS``
    without a listener), in case the publish was lost. Raises :class:`OrderStatusUnknown` at the deadline.
    """
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        published = None
        if listening is not None:
            try:
                published = listening.get(token, timeout=min(left, answers.POLL_SECONDS))
            except redis.RedisError:
                answers.listener_close()
                listening = None
        else:
            time.sleep(min(left, NO_LISTENER_POLL_SECONDS))
        if published is not None:
            return json.loads(published, parse_float=Decimal)  # the order's amounts exactly
        outcome = _status(token)
        if outcome is not None:
            return outcome
    outcome = _status(token)
    if outcome is not None:
        return outcome
    raise OrderStatusUnknown(
        "The order was submitted but its outcome is not known yet: query the order "
        "(by client_order_id) or retry with the same client_order_id or Idempotency-Key.",
        fields={"order": "Status unknown."},
    )


def domain_outcome(exc: DomainError) -> dict:
    """The stored outcome of a command refused with ``exc``."""
    kind = type(exc)
    return {"error": {"type": f"{kind.__module__}:{kind.__qualname__}", "message": exc.message, "fields": exc.fields}}


def outcome_raise(error: dict):
    """Raise the error a stored outcome describes: the same :class:`DomainError` class, message and fields."""
    module, _, name = error["type"].partition(":")
    kind = getattr(importlib.import_module(module), name, None) if module.startswith("apps.") else None
    if not (isinstance(kind, type) and issubclass(kind, DomainError)):
        raise RuntimeError(f"the sequencer failed on this command: {error['message']}")
    exc = kind.__new__(kind)
    DomainError.__init__(exc, error["message"], fields=error.get("fields") or {})
    raise exc


def order_of_outcome(outcome: dict) -> Order:
    """The order an outcome names: from the done notification's row when it carries one, else read."""
    if "error" in outcome:
        outcome_raise(outcome["error"])
    if "order" in outcome:
        return order_rows.order_from_json(outcome["order"])
    return Order.objects.get(id=outcome["order_id"])


def order_place(
    *,
    user_id: int,
    market: str,
    side: str,
    type: str = OrderType.LIMIT,
    price: str | Decimal | None = None,
    qty: str | Decimal | None = None,
    quote_qty: str | Decimal | None = None,
    time_in_force: str | None = None,
    post_only: bool = False,
    stp: str | None = None,
    client_order_id: str = "",
    idempotency_key: str = "",
) -> Order:
    """Place an order and return it as it ends up: :func:`apps.orders.services.placement.order_place`
    (arguments, amounts, holds, statuses and errors are documented there), run inline or by the
    market's sequencer (``settings.ORDERS_ENGINE``).

    ``idempotency_key`` (sequencer mode; optional) makes a retry under the same key return the
    first command's outcome. Without one, a ``client_order_id`` already used for this very order is answered from
    the database (:func:`apps.orders.services.placement.order_replay`) without waiting for the sequencer. Also
    raises :class:`OrderStatusUnknown` (sequencer mode, no answer in time).
    """
    arguments: dict[str, Any] = {
        "user_id": user_id,
        "market": market,
        "side": side,
        "type": type,
        "price": price,
        "qty": qty,
        "quote_qty": quote_qty,
        "time_in_force": time_in_force,
        "post_only": post_only,
        "stp": stp,
        "client_order_id": client_order_id,
    }
    if settings.ORDERS_ENGINE == "inline":
        return placement.order_place(**arguments)
    payload = _payload_checked(arguments)  # a string the database cannot hold is refused before any read
    if not idempotency_key:  # under a key, the key's command answers (and a key reused for another request is a 409)
        replayed = placement.order_replay(**payload)
        if replayed is not None:
            return replayed
    outcome = command_submit(
        market=market, kind=CommandKind.PLACE, user_id=user_id, payload=payload, key=idempotency_key
    )
    return order_of_outcome(outcome)


class _Judged(Exception):
    """Raised inside :func:`order_judge`'s savepoint to undo the placement it judged."""


def order_judge(**arguments: Any) -> None:
    """Judge an order exactly as :func:`order_place` would (same arguments, same errors: filters, funds,
    post-only, fill-or-kill, halted market) and write nothing: the placement runs here, inline under the market
    lock, in a savepoint that is then rolled back, whatever ``settings.ORDERS_ENGINE`` says (a command handed
    to a sequencer could not be taken back: the "test" order would be placed for real).
    """
    try:
        with transaction.atomic():
            placement.order_place(**arguments)
            raise _Judged
    except _Judged:
        pass


def order_cancel(
    *,
    order_id: int,
    user_id: int | None = None,
    by_operator: bool = False,
    cancel_client_order_id: str = "",
    only_status: str = "",
) -> Order:
    """Cancel an open order: :func:`apps.orders.services.cancel.order_cancel` (its errors, its
    ``cancel_client_order_id`` and its ``only_status``, judged when the cancel is applied), inline or by the
    sequencer of the order's market. Also raises :class:`OrderStatusUnknown` (sequencer mode, no answer in time)."""
    arguments: dict[str, Any] = {"order_id": order_id, "user_id": user_id, "by_operator": by_operator}
    if cancel_client_order_id:
        arguments["cancel_client_order_id"] = cancel_client_order_id
    if only_status:
        arguments["only_status"] = _open_status(only_status)
    if settings.ORDERS_ENGINE == "inline":
        return cancel.order_cancel(**arguments)
    found = Order.objects.filter(id=order_id).values_list("market__symbol", "user_id").first()
    if found is None or (user_id is not None and found[1] != user_id):
        raise NotFound(f"No order {order_id}.", fields={"order": "No such order."})
    outcome = command_submit(market=found[0], kind=CommandKind.CANCEL, user_id=found[1], payload=arguments)
    return order_of_outcome(outcome)


def _open_status(status: str) -> str:
    """``status`` when it is an open one (``only_status`` of a cancel); ``ValueError`` otherwise (a caller's bug)."""
    if status not in (OrderStatus.OPEN, OrderStatus.PARTIALLY_FILLED):
        raise ValueError(f"only_status {status!r} is not an open status")
    return status


def order_cancel_by_operator(
    *, order_id: int, operator_id: int, reason: str, wait_seconds: float | None = None
) -> Order:
    """Cancel the open order ``order_id`` of any customer (its whole remaining hold released, end reason
    ``cancelled_by_operator``) and audit it (``order.cancel_by_operator``: the operator, the status before and
    after, ``reason``) in the transaction that cancels it: inline, or as a command of the market's sequencer
    (its batch writes the audit row, :func:`apps.orders.services.cancel.order_cancel_audit`).

    Raises :class:`DomainError` (no reason, field ``reason``), :class:`NotFound`, :class:`InvalidState` (the
    order has ended), :class:`OrderStatusUnknown` (sequencer mode, no answer within ``wait_seconds``, by default
    ``settings.ORDERS_ENGINE_WAIT_SECONDS``: the command stays queued and is applied, and audited, once).
    """
    reason = reason_checked(reason)
    arguments: dict[str, Any] = {
        "order_id": order_id,
        "user_id": None,
        "by_operator": True,
        "operator_id": operator_id,
        "reason": reason,
    }
    if settings.ORDERS_ENGINE == "inline":
        return cancel.order_cancel(**arguments)
    found = Order.objects.filter(id=order_id).values_list("market__symbol", "user_id").first()
    if found is None:
        raise NotFound(f"No order {order_id}.", fields={"order": "No such order."})
    outcome = command_submit(
        market=found[0], kind=CommandKind.CANCEL, user_id=found[1], payload=arguments, wait_seconds=wait_seconds
    )
    return order_of_outcome(outcome)


def order_cancel_by_client_id(
    *, user_id: int, market: str, client_order_id: str, cancel_client_order_id: str = "", only_status: str = ""
) -> Order:
    """Cancel the open order ``user_id`` placed on ``market`` (a symbol) with ``client_order_id``
    (:func:`apps.orders.services.cancel.order_cancel_by_client_id`: its errors, its ``only_status``), inline or by the
    market's sequencer.

    Through the sequencer the order is looked up when the command's turn comes, so a placement queued before the
    cancel (one whose caller timed out) is found and cancelled, not answered "no such order" and left to go live
    later. Raises :class:`NotFound` (no such market, or no such order on it) and :class:`OrderStatusUnknown`
    (sequencer mode, no answer in time).
    """
    if settings.ORDERS_ENGINE == "inline":
        return cancel.order_cancel_by_client_id(
            market_id=_market_id(market),
            user_id=user_id,
            client_order_id=client_order_id,
            cancel_client_order_id=cancel_client_order_id,
            only_status=only_status,
        )
    payload: dict[str, Any] = {"user_id": user_id, "client_order_id": client_order_id, "by_operator": False}
    if cancel_client_order_id:
        payload["cancel_client_order_id"] = cancel_client_order_id
    if only_status:
        payload["only_status"] = _open_status(only_status)
    return order_of_outcome(command_submit(market=market, kind=CommandKind.CANCEL, user_id=user_id, payload=payload))


def _market_id(symbol: str) -> int:
    """The id of the market ``symbol``; :class:`NotFound` for none."""
    market_id = Market.objects.filter(symbol=symbol).values_list("id", flat=True).first()
    if market_id is None:
        raise NotFound(f"No market {symbol}.", fields={"market": "No such market."})
    return market_id


def open_orders_cancel(
    *, user_id: int, market: str, by_operator: bool = False, wait_seconds: float | None = None
) -> list[Order]:
    """Cancel every open order of ``user_id`` on ``market`` (a symbol), oldest first, and return them cancelled
    (:func:`apps.orders.services.cancel.open_orders_cancel`), inline or by the market's sequencer.

    Through the sequencer it is one command applied in queue order: it also cancels the user's placements queued
    before it and not applied yet (a caller whose placement timed out can cancel everything and know that order
    is not left to go live later), and none queued after it; ``wait_seconds`` bounds the wait for its outcome
    (:func:`command_submit`'s default otherwise). Raises :class:`NotFound` (no such market) and
    :class:`OrderStatusUnknown` (sequencer mode, no answer in time: the command stays queued and is applied once).
    """
    if settings.ORDERS_ENGINE == "inline":
        return cancel.open_orders_cancel(market_id=_market_id(market), user_id=user_id, by_operator=by_operator)
    payload = {"user_id": user_id, "by_operator": by_operator}
    outcome = command_submit(
        market=market, kind=CommandKind.CANCEL_ALL, user_id=user_id, payload=payload, wait_seconds=wait_seconds
    )
    if "error" in outcome:
        outcome_raise(outcome["error"])
    return list(Order.objects.filter(id__in=outcome["order_ids"]).order_by("id"))
