"""Reconciliation: open orders explain held funds (invariant 4); orders' holds add up (invariant 8)."""

import json
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from apps.ledger.reconciliation import reconcile, registered_invariants
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.tests.helpers import place

D = Decimal


@pytest.fixture
def traded(btc_usdt, btc, usdt):
    """A partially filled bid, a filled ask, a resting ask and an IOC that expired."""
    buyer, seller = UserFactory(), UserFactory()
    fund(buyer, usdt, "100000")
    fund(seller, btc, "10")
    ask = place(seller, side="sell", price="50000", qty="0.1")
    bid = place(buyer, side="buy", price="50100", qty="0.3")
    resting = place(seller, side="sell", price="51000", qty="0.2")
    place(buyer, side="buy", price="40000", qty="0.1", time_in_force="IOC")
    return {"ask": ask, "bid": bid, "resting": resting, "buyer": buyer, "seller": seller}


def failing(report) -> dict[str, list[dict]]:
    return {check.name: check.details for check in report.checks if not check.ok}


def test_orders_register_invariants_4_and_8(traded):
    assert registered_invariants() >= {4, 8}
    report = reconcile()
    assert report.ok, report.as_dict()
    assert {c.name for c in report.checks} >= {
        "held_matches_open_holds",
        "ended_orders_hold_nothing",
        "order_holds_add_up",
        "trades_settled_by_their_entry",
    }
    out = StringIO()
    call_command("reconcile", "--json", "--asset", "USDT", stdout=out)
    assert json.loads(out.getvalue())["ok"] is True


def test_an_open_order_whose_hold_was_changed_behind_the_ledger_is_found(traded):
    bid = traded["bid"]
    with connection.cursor() as cursor:
        cursor.execute("UPDATE orders_order SET held_remaining = held_remaining - 1 WHERE id = %s", [bid.id])

    problems = failing(reconcile())

    assert problems.keys() == {"held_matches_open_holds", "order_holds_add_up"}
    assert problems["held_matches_open_holds"][0]["owner"] == traded["buyer"].id
    (row,) = problems["order_holds_add_up"]
    assert (row["order_id"], row["held_amount"], row["consumed_by_fills"], row["held_remaining"]) == (
        bid.id,
        "15030.000000",
        "5000.000000",
        "10029.000000",
    )


def test_an_ended_order_still_holding_is_found(traded):
    ask = traded["ask"]
    with connection.cursor() as cursor:  # the CHECK constraint would refuse it; reconcile must see it anyway
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # run the ledger's deferred checks so ALTER TABLE may run
        cursor.execute("ALTER TABLE orders_order DROP CONSTRAINT order_ended_holds_nothing")  # rolled back after
        cursor.execute("UPDATE orders_order SET held_remaining = 0.01 WHERE id = %s", [ask.id])

    problems = failing(reconcile())

    assert [row["order_id"] for row in problems["ended_orders_hold_nothing"]] == [ask.id]
    assert problems["ended_orders_hold_nothing"][0]["held_remaining"] == "0.01000000"


def test_a_trade_not_settled_by_its_own_entry_is_found(traded):
    from apps.ledger.models import JournalEntry

    bid = traded["bid"]
    hold = JournalEntry.objects.get(idempotency_key=f"order:{bid.id}:hold")
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO orders_trade (id, market_id, taker_order_id, maker_order_id, seq, taker_user_id,
                   maker_user_id, taker_side, price, qty, quote_qty, taker_fee, maker_fee, taker_fee_rate,
                   maker_fee_rate, entry_id, created_at)
               SELECT %s, market_id, %s, %s, 9, %s, %s, 'buy', 50000, 0.1, 5000, 0, 0, 0, 0, %s, now()
               FROM orders_order WHERE id = %s""",
            [f"{bid.id}-9", bid.id, traded["resting"].id, traded["buyer"].id, traded["seller"].id, hold.id, bid.id],
        )

    problems = failing(reconcile())

    assert [row["trade"] for row in problems["trades_settled_by_their_entry"]] == [f"{bid.id}-9"]
