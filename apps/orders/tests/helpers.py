"""Helpers shared by the orders tests."""

from decimal import Decimal

from apps.ledger.models import Asset
from apps.ledger.selectors import balances_for_user
from apps.orders.models import Order
from apps.orders.services import order_place


def balance(user, asset: Asset) -> tuple[Decimal, Decimal]:
    """The user's ``(available, held)`` of ``asset``."""
    found = next(b for b in balances_for_user(user.id) if b.asset == asset.code)
    return found.available, found.held


def place(user, market="BTC-USDT", **kwargs) -> Order:
    """:func:`order_place` for ``user`` on ``market`` (a limit order unless ``type`` says otherwise)."""
    return order_place(user_id=user.id, market=str(market), **kwargs)


def refreshed(order: Order) -> Order:
    return Order.objects.get(id=order.id)
