"""The set-based statements generated from the models (apps.orders.store.sql): rows as one JSON parameter."""

import json
from datetime import UTC, datetime
from decimal import Decimal

from django.db import connection

from apps.ledger.tests.factories import UserFactory
from apps.orders.models import Order, OrderStatus, Side
from apps.orders.store import orders as order_rows
from apps.orders.store.sql import rows_json

D = Decimal


def test_rows_travel_with_exact_amounts_times_with_their_offset_and_choices_as_values():
    moment = datetime(2026, 12, 1, 21, 0, 0, 123456, tzinfo=UTC)
    text = rows_json(
        ["qty", "at", "side", "gone"], [[D("12345678901234567890.123456789012345678"), moment, Side.BUY, None]]
    )
    assert json.loads(text) == [
        {"qty": "12345678901234567890.123456789012345678", "at": "2026-12-01T21:00:00.123456+00:00", "side": "buy"}
        | {"gone": None}
    ]
    assert json.loads(rows_json(["qty"], [[D("1E-18")], [D("0E-18")]])) == [
        {"qty": "0.000000000000000001"},
        {"qty": "0.000000000000000000"},
    ]


def test_orders_written_through_one_json_parameter_read_back_as_they_were(btc_usdt, usdt):
    user = UserFactory()
    now = datetime(2026, 12, 1, 21, 0, 0, 654321, tzinfo=UTC)
    order = Order(
        id=None,
        market=btc_usdt,
        user=user,
        client_order_id="json-1",
        side=Side.BUY,
        type="limit",
        price=D("50000.01"),
        qty=D("0.00000001"),
        quote_qty=None,
        time_in_force="GTC",
        post_only=True,
        stp="expire_taker",
        status=OrderStatus.OPEN,
        reject_reason="",
        filled_qty=D(0),
        filled_quote_qty=D(0),
        fee_total=D(0),
        held_asset=usdt,
        held_amount=D("0.000500000000000000"),
        held_remaining=D("0.0005"),
        created_at=now,
        updated_at=now,
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(pg_get_serial_sequence('orders_order', 'id'))")
        order.id = cursor.fetchone()[0]
        cursor.execute(order_rows.INSERT_ORDERS, order_rows.order_params([order]))
    stored = Order.objects.get(id=order.id)
    assert [getattr(stored, name) for name in order_rows.ORDER_FIELDS] == [
        getattr(order, name) for name in order_rows.ORDER_FIELDS
    ]
