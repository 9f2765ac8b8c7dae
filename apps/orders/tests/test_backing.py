"""Reconciliation's backing rule for orders and trades (invariant 8): every ``trade``, ``order_hold`` and
``order_release`` entry is the entry of the trade or order it names."""

import pytest
from django.db import connection

from apps.ledger.models import AccountKind, EntryReason, JournalEntry
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import credit, debit, user_account
from apps.ledger.tests.factories import UserFactory, fund
from apps.ledger.tests.forgery import available_to_held, backing_failures, flagged_entries, forge, user_to_user
from apps.orders.models import Trade
from apps.orders.services import order_cancel
from apps.orders.tests.helpers import place


@pytest.fixture
def traded(btc_usdt, btc, usdt):
    """Fills at a better price (a release), a cancelled resting order, an expired IOC, a market buy, an open bid."""
    buyer, seller = UserFactory(), UserFactory()
    fund(buyer, usdt, "100000")
    fund(seller, btc, "10")
    ask = place(seller, side="sell", price="50000", qty="0.1")
    bid = place(buyer, side="buy", price="50100", qty="0.3")
    resting = place(seller, side="sell", price="51000", qty="0.2")
    place(buyer, side="buy", price="40000", qty="0.1", time_in_force="IOC")
    place(buyer, type="market", side="buy", quote_qty="1020", time_in_force="IOC")
    cancelled = place(seller, side="sell", price="60000", qty="0.1")
    order_cancel(order_id=cancelled.id, user_id=seller.id)
    open_bid = place(buyer, side="buy", price="30000", qty="0.1")
    return {
        "ask": ask, "bid": bid, "resting": resting, "cancelled": cancelled, "open_bid": open_bid,
        "buyer": buyer, "seller": seller, "trade": Trade.objects.filter(maker_order=ask).get(),
    }  # fmt: skip


def test_placing_matching_and_cancelling_orders_is_backed(traded):
    report = reconcile()

    assert report.ok, report.as_dict()
    assert backing_failures(report) == {}


def test_a_forged_trade_with_a_made_up_reference_is_flagged(traded, usdt):
    entry = forge(
        reason=EntryReason.TRADE,
        legs=user_to_user(traded["buyer"], traded["seller"], usdt, "100"),
        idempotency_key="trade:999-1",
        reference_type="trade",
        reference_id="999-1",
    )

    assert flagged_entries(reconcile()) == {entry.id: "no trade is settled by this entry under its key"}


def test_a_forged_trade_reusing_a_real_trades_reference_is_flagged(traded, usdt):
    trade = traded["trade"]
    entry = forge(
        reason=EntryReason.TRADE,
        legs=user_to_user(traded["buyer"], traded["seller"], usdt, "100"),
        reference_type="trade",
        reference_id=trade.id,
    )

    failures = backing_failures(reconcile())

    assert failures == {
        "order_entries_backed": [
            {
                "entry": entry.id,
                "idempotency_key": entry.idempotency_key,
                "reason": "trade",
                "reference_type": "trade",
                "reference_id": trade.id,
                "problem": "no trade is settled by this entry under its key",
            }
        ]
    }


def test_a_forged_hold_of_a_made_up_order_is_flagged(traded, usdt):
    buyer = traded["buyer"]
    entry = forge(
        reason=EntryReason.ORDER_HOLD,
        legs=available_to_held(buyer, usdt, "10"),
        idempotency_key="order:987654:hold",
        reference_type="order",
        reference_id="987654",
    )

    assert flagged_entries(reconcile()) == {entry.id: "no such order"}


def test_a_second_hold_of_a_real_order_under_a_new_key_is_flagged(traded, usdt):
    open_bid = traded["open_bid"]
    entry = forge(
        reason=EntryReason.ORDER_HOLD,
        legs=available_to_held(traded["buyer"], usdt, "3000"),
        reference_type="order",
        reference_id=str(open_bid.id),
    )

    assert flagged_entries(reconcile()) == {entry.id: "not the order's own key"}


def test_a_release_of_an_open_order_under_its_own_key_is_flagged(traded, usdt):
    open_bid = traded["open_bid"]
    entry = forge(
        reason=EntryReason.ORDER_RELEASE,
        legs=available_to_held(traded["buyer"], usdt, "3000", reverse=True),
        idempotency_key=f"order:{open_bid.id}:release",
        reference_type="order",
        reference_id=str(open_bid.id),
    )

    assert flagged_entries(reconcile()) == {entry.id: "a release of an order still open"}


def test_a_release_of_an_ended_order_paid_to_another_user_is_flagged(traded, usdt, btc):
    """The filled ask released nothing (its whole hold was sold): its release key is free, so a forgery under it
    moves funds from its owner's held BTC... to another user's available BTC."""
    ask, seller, buyer = traded["ask"], traded["seller"], traded["buyer"]
    held = user_account(seller.id, btc, AccountKind.USER_HELD)
    entry = forge(
        reason=EntryReason.ORDER_RELEASE,
        legs=[debit(held, held.balance), credit(user_account(buyer.id, btc), held.balance)],
        idempotency_key=f"order:{ask.id}:release",
        reference_type="order",
        reference_id=str(ask.id),
    )

    assert flagged_entries(reconcile()) == {entry.id: "a posting is not the order's on its owner's accounts"}


def test_a_hold_whose_order_records_another_amount_is_flagged(traded):
    open_bid = traded["open_bid"]
    with connection.cursor() as cursor:
        cursor.execute("UPDATE orders_order SET held_amount = held_amount + 1 WHERE id = %s", [open_bid.id])
    hold = JournalEntry.objects.get(idempotency_key=f"order:{open_bid.id}:hold")

    assert flagged_entries(reconcile()) == {hold.id: "a posting is not the order's on its owner's accounts"}
