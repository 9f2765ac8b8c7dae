"""The orders app's SQL (apps.orders.store): rows written as one JSON parameter or arrays, the fee rates a batch reads."""

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import connection

from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.engine.batch import OrderState, Rates
from apps.orders.models import Order, OrderStatus, Side
from apps.orders.services import fee_schedule_create, fee_tier_assign
from apps.orders.store import engine as engine_sql
from apps.orders.store import orders as order_rows
from apps.orders.store.sql import rows_json
from apps.orders.tests.helpers import place

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
    with pytest.raises(TypeError, match="set"):
        rows_json(["qty"], [[{D(1)}]])
    with pytest.raises(TypeError, match="float"):
        rows_json(["qty", "price"], [[D(1), D(2)], [D(1), 0.1]])  # was written as the JSON number 0.1


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


def test_the_rates_in_force_are_the_default_schedule_and_the_tiers_of_the_users_asked_for(default_fees):
    vip, other, plain = UserFactory(), UserFactory(), UserFactory()
    tier = fee_schedule_create(name="vip", maker_rate="0", taker_rate="0.0005")
    fee_tier_assign(user_id=vip.id, schedule_id=tier.id)
    fee_tier_assign(user_id=other.id, schedule_id=tier.id)

    def rates(user_ids):
        with connection.cursor() as cursor:
            cursor.execute(engine_sql.RATES, [user_ids])
            return engine_sql.rates_of(cursor.fetchall())

    assert rates([vip.id, plain.id]) == Rates(default=(D("0.001"), D("0.001")), tiers={vip.id: (D(0), D("0.0005"))})
    default_fees.delete()
    assert rates([vip.id]) == Rates(default=None, tiers={vip.id: (D(0), D("0.0005"))})
    assert rates([]) == Rates(default=None)


def _scans_of(plan: dict) -> list[tuple[str, str]]:
    """``(node type, relation)`` of every scan in an ``EXPLAIN (FORMAT JSON)`` plan."""
    scans = [(plan["Node Type"], plan["Relation Name"])] if "Relation Name" in plan else []
    for child in plan.get("Plans", []):
        scans += _scans_of(child)
    return scans


def test_the_resting_orders_update_reaches_them_by_primary_key_not_by_scanning_the_orders(btc_usdt, btc, usdt):
    buyer, seller = UserFactory(), UserFactory()
    fund(buyer, usdt, "100000")
    fund(seller, btc, "10")
    maker = place(seller, side="sell", price="50000", qty="0.5")
    taker = place(buyer, side="buy", price="50000", qty="0.1")
    columns = ", ".join(c for c in order_rows.ORDER_FIELDS if c != "id")
    with connection.cursor() as cursor:  # 3,000 copies of the filled taker
        cursor.execute(
            f"INSERT INTO orders_order ({columns}) SELECT {columns} FROM orders_order, generate_series(1, 3000) "
            "WHERE id = %s",
            [taker.id],
        )
        cursor.execute("ANALYZE orders_order")
        state = OrderState(D("0.1"), D("5000"), D(0), D("0.4"), OrderStatus.PARTIALLY_FILLED, "")
        params = order_rows.order_state_params(datetime.now(UTC), {maker.id: state})
        cursor.execute(f"EXPLAIN (FORMAT JSON) {order_rows.UPDATE_MAKERS}", params)
        (plan,) = cursor.fetchone()[0]
    scans = _scans_of(plan["Plan"])
    assert ("Seq Scan", "orders_order") not in scans
    assert ("Index Scan", "orders_order") in scans
