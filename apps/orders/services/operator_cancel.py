"""An operator cancels a customer's open order, with a reason, audited in the transaction that cancels it."""

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction

from apps.audit.services import audit_record
from apps.core.errors import DomainError, NotFound

from ..models import CommandKind, Order, OrderStatus
from . import cancel
from .commands import command_submit, order_of_outcome

AUDIT_ACTION = "order.cancel_by_operator"


def order_cancel_by_operator(
    *, order_id: int, operator_id: int, reason: str, wait_seconds: float | None = None
) -> Order:
    """Cancel the open order ``order_id`` of any customer (its whole remaining hold released, end reason
    ``cancelled_by_operator``) and audit it (``order.cancel_by_operator``: the operator, the status before and
    after, ``reason``) in the same transaction: inline, or as a command of the market's sequencer, which writes the
    audit row in the batch that cancels the order (:func:`order_cancel_audit`).

    Raises :class:`DomainError` (no reason, field ``reason``), :class:`NotFound`, :class:`InvalidState` (the
    order has ended), :class:`~apps.orders.errors.OrderStatusUnknown` (sequencer mode, no answer within
    ``wait_seconds``, by default ``settings.ORDERS_ENGINE_WAIT_SECONDS``: the command stays queued and is applied,
    and audited, once).
    """
    if not isinstance(reason, str) or not reason.strip():
        raise DomainError("A reason is required.", fields={"reason": "A reason is required."})
    found = Order.objects.filter(id=order_id).values_list("market__symbol", "user_id").first()
    if found is None:
        raise NotFound(f"No order {order_id}.", fields={"order": "No such order."})
    symbol, user_id = found
    if settings.ORDERS_ENGINE == "inline":
        with transaction.atomic():
            return order_cancel_audited(order_id=order_id, operator_id=operator_id, reason=reason)
    payload: dict[str, Any] = {
        "order_id": order_id,
        "user_id": None,
        "by_operator": True,
        "operator_id": operator_id,
        "reason": reason.strip(),
    }
    outcome = command_submit(
        market=symbol, kind=CommandKind.CANCEL, user_id=user_id, payload=payload, wait_seconds=wait_seconds
    )
    return order_of_outcome(outcome)


def order_cancel_audited(*, order_id: int, operator_id: int, reason: str) -> Order:
    """An operator's cancel (:func:`apps.orders.services.cancel.order_cancel`) and its audit row, in the caller's
    transaction: inline, and a sequencer applying its commands one at a time. Raises what the cancel raises."""
    order = cancel.order_cancel(order_id=order_id, by_operator=True)
    order_cancel_audit(order_id=order.id, operator_id=operator_id, reason=reason, filled_qty=order.filled_qty)
    return order


def order_cancel_audit(*, order_id: int, operator_id: int, reason: str, filled_qty: Decimal) -> None:
    """The audit row of an operator's cancel, in the caller's transaction (the one that cancels the order).

    ``filled_qty`` is the order's as cancelled: the status before was ``partially_filled`` when it filled anything,
    else ``open`` (read from the cancel itself, so a fill earlier in the same sequencer batch counts)."""
    before = OrderStatus.PARTIALLY_FILLED if filled_qty > 0 else OrderStatus.OPEN
    audit_record(
        actor_id=operator_id,
        action=AUDIT_ACTION,
        object_type="orders.order",
        object_id=order_id,
        before={"status": before.value},
        after={"status": OrderStatus.CANCELLED.value, "reason": reason.strip()},
    )
