"""Order and trade rules PostgreSQL enforces whatever code writes."""

from decimal import Decimal

import pytest
from django.db import IntegrityError, ProgrammingError, connection, transaction

from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.models import Order, Trade
from apps.orders.tests.helpers import place

D = Decimal


@pytest.fixture
def orders(btc_usdt, btc, usdt):
    buyer, seller = UserFactory(), UserFactory()
    fund(buyer, usdt, "100000")
    fund(seller, btc, "1")
    place(seller, side="sell", price="50000", qty="0.1")
    resting = place(buyer, side="buy", price="50000", qty="0.2")
    return resting


@pytest.mark.parametrize(
    ("changes", "constraint"),
    [
        ({"status": "cancelled"}, "order_ended_holds_nothing"),
        ({"status": "filled", "held_remaining": D(0)}, "order_filled_means_filled"),
        ({"filled_qty": D("0.3")}, "order_filled_within_qty"),
        ({"status": "open"}, "order_open_has_no_fill"),
        ({"held_remaining": D("-1")}, "order_amounts_not_negative"),
        ({"held_remaining": D("20000")}, "order_amounts_not_negative"),  # more than was held
        ({"type": "market", "price": None, "time_in_force": "IOC"}, "order_only_gtc_limit_rests"),
        ({"time_in_force": "IOC"}, "order_only_gtc_limit_rests"),
        ({"price": None}, "order_shape_matches_type"),
        ({"quote_qty": D("100000")}, "order_shape_matches_type"),
        ({"qty": None, "status": "expired", "held_remaining": D(0)}, "order_shape_matches_type"),
        (
            {
                "side": "sell",
                "type": "market",
                "price": None,
                "qty": None,
                "quote_qty": D("100000"),
                "time_in_force": "IOC",
                "status": "expired",
                "held_remaining": D(0),
            },
            "order_shape_matches_type",
        ),  # sell budget
        (
            {"post_only": True, "time_in_force": "IOC", "status": "expired", "held_remaining": D(0)},
            "order_post_only_is_gtc_limit",
        ),
    ],
)
def test_order_rules(orders, changes, constraint):
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        Order.objects.filter(id=orders.id).update(**changes)


def test_trades_are_immutable_and_exact(orders):
    trade = Trade.objects.get()
    with pytest.raises(ProgrammingError, match="Cannot update"), transaction.atomic():
        Trade.objects.filter(id=trade.id).update(qty=D("0.2"))
    with pytest.raises(ProgrammingError, match="Cannot update or delete"), transaction.atomic():
        Trade.objects.filter(id=trade.id).delete()
    with pytest.raises(IntegrityError, match="trade_quote_is_qty_times_price"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                """INSERT INTO orders_trade (id, market_id, taker_order_id, maker_order_id, seq, taker_user_id,
                       maker_user_id, taker_side, price, qty, quote_qty, taker_fee, maker_fee, taker_fee_rate,
                       maker_fee_rate, entry_id, created_at)
                   SELECT id || 'x', market_id, taker_order_id, maker_order_id, seq + 1, taker_user_id, maker_user_id,
                       taker_side, price, qty, quote_qty + 0.000001, taker_fee, maker_fee, taker_fee_rate,
                       maker_fee_rate, entry_id, created_at
                   FROM orders_trade WHERE id = %s""",
                [trade.id],
            )
