"""Order cancellation (:func:`order_cancel`, :func:`open_orders_cancel`) under the market's row lock, like a
placement."""

from decimal import Decimal

from django.utils import timezone

from apps.audit.services import audit_record
from apps.core.errors import InvalidState, NotFound
from apps.ledger.db import PreparedCursor
from apps.ledger.services import entries_post
from apps.ledger.trading import TradingAccounts, order_release_entry
from apps.ledger.transactions import retrying_atomic

from ..errors import CancelRestricted
from ..events import book_changed
from ..models import OPEN_STATUSES, EndReason, Market, Order, OrderStatus
from ..store import orders as order_rows
from ..store.markets import LOCK_MARKET_OF_ORDER, locked_market_of_order


@retrying_atomic
def order_cancel(
    *,
    order_id: int,
    user_id: int | None = None,
    by_operator: bool = False,
    operator_id: int | None = None,
    reason: str = "",
    cancel_client_order_id: str = "",
    only_status: str = "",
) -> Order:
    """Cancel an open order and release its whole remaining hold (``order:<id>:release``), exactly once.

    ``cancel_client_order_id``: the cancel request's own client id (Binance's ``newClientOrderId`` of a cancel), the
    ``c`` of the order's ``CANCELED`` execution report; empty for none. ``only_status`` (``open`` or
    ``partially_filled``; empty for either): cancel only an order in that status when the cancel is applied, under
    the market lock (Binance's ``cancelRestrictions`` ``ONLY_NEW`` / ``ONLY_PARTIALLY_FILLED``), else
    :class:`~apps.orders.errors.CancelRestricted`.

    ``user_id``: the owner asking (an order of another user is :class:`NotFound`);
    ``None`` for an operator or the system (``by_operator`` records who). An ``operator_id`` is audited with the
    ``reason`` in the same transaction (:func:`order_cancel_audit`). Takes the
    market lock, so it never interleaves with a placement that fills the order: the
    order is either filled first (and the cancel releases what is left, or finds it
    ended) or cancelled first (and the placement no longer sees it). Works on a halted
    market. Raises :class:`NotFound`, :class:`InvalidState` (409) when the order has
    already ended. Keeps invariants 4 and 8.
    """
    with PreparedCursor() as cursor:
        # One round trip: BEGIN, the market lock, then the order as the lock's previous holder left it.
        market_rows, order_found = cursor.pipeline(
            [(LOCK_MARKET_OF_ORDER, [order_id]), (order_rows.ORDER_BY_ID, [order_id])]
        )
        order = order_rows.order_from_row(order_found[0]) if market_rows and order_found else None
        if order is None or (user_id is not None and order.user_id != user_id):
            raise NotFound(f"No order {order_id}.", fields={"order": "No such order."})
        market = locked_market_of_order(market_rows[0])
        if order.status not in OPEN_STATUSES:
            message = f"Order {order_id} is {order.status}: it can no longer be cancelled."
            raise InvalidState(message, fields={"order": message})
        if only_status and order.status != only_status:
            raise CancelRestricted(order.id, order.status)
        release = order.held_remaining
        order.status = OrderStatus.CANCELLED
        order.reject_reason = EndReason.CANCELLED_BY_OPERATOR if by_operator else EndReason.CANCELLED
        order.held_remaining = Decimal(0)
        order.updated_at = timezone.now()
        accounts = TradingAccounts.lock(
            cursor,
            user_ids={order.user_id},
            assets=[a for a in market.assets if a.id == order.held_asset_id],
            with_statement=order_rows.CANCEL_ORDER,
            with_params=[str(order.reject_reason), order.updated_at, order.id],
        )
        entries_post(
            [
                order_release_entry(
                    accounts, order_id=order.id, user_id=order.user_id, asset_id=order.held_asset_id, amount=release
                )
            ]
        )
        book_changed.send(
            sender=Order,
            market_id=market.id,
            update_id=market.sequence,
            order_ids=[order.id],
            taker_order_id=None,
            cancel_client_order_id=cancel_client_order_id,
        )
        if operator_id is not None:
            order_cancel_audit(order_id=order.id, operator_id=operator_id, reason=reason, filled_qty=order.filled_qty)
    return order


def order_cancel_audit(*, order_id: int, operator_id: int, reason: str, filled_qty: Decimal) -> None:
    """The audit row ``order.cancel_by_operator`` of an operator's cancel, in the caller's transaction (the one that
    cancels the order: :func:`order_cancel`, or a sequencer's batch).

    ``filled_qty`` is the order's as cancelled: the status before was ``partially_filled`` when it filled anything,
    else ``open`` (read from the cancel itself, so a fill earlier in the same sequencer batch counts)."""
    before = OrderStatus.PARTIALLY_FILLED if filled_qty > 0 else OrderStatus.OPEN
    audit_record(
        actor_id=operator_id,
        action="order.cancel_by_operator",
        object_type="orders.order",
        object_id=order_id,
        before={"status": before.value},
        after={"status": OrderStatus.CANCELLED.value, "reason": reason.strip()},
    )


@retrying_atomic
def open_orders_cancel(*, market_id: int, user_id: int, by_operator: bool = False) -> list[Order]:
    """Cancel every open order of ``user_id`` on the market, oldest first, in one transaction under the market
    lock (each as :func:`order_cancel`: its release, its sequence bump); return them as cancelled (none: an
    empty list, nothing written). Raises :class:`NotFound` for no such market."""
    if not Market.objects.select_for_update(no_key=True).filter(id=market_id).exists():
        raise NotFound(f"No market {market_id}.", fields={"market": "No such market."})
    open_ids = Order.objects.filter(market_id=market_id, user_id=user_id, status__in=OPEN_STATUSES).order_by("id")
    return [
        order_cancel(order_id=order_id, user_id=user_id, by_operator=by_operator)
        for order_id in open_ids.values_list("id", flat=True)
    ]


@retrying_atomic
def order_cancel_by_client_id(
    *,
    market_id: int,
    user_id: int,
    client_order_id: str,
    by_operator: bool = False,
    cancel_client_order_id: str = "",
    only_status: str = "",
) -> Order:
    """Cancel the open order ``user_id`` placed on the market with ``client_order_id``, as :func:`order_cancel`
    (its errors, its ``only_status``). Raises :class:`NotFound` when the user has no order of that client id on that
    market."""
    order_id = (
        Order.objects.filter(market_id=market_id, user_id=user_id, client_order_id=client_order_id)
        .values_list("id", flat=True)
        .first()
    )
    if order_id is None:
        raise NotFound(f"No order with client_order_id {client_order_id!r}.", fields={"order": "No such order."})
    return order_cancel(
        order_id=order_id,
        user_id=user_id,
        by_operator=by_operator,
        cancel_client_order_id=cancel_client_order_id,
        only_status=only_status,
    )
