"""SCENARIOS.md S1, S2, S4 (order side) and S9, with their exact values."""

from decimal import Decimal

import pytest

from apps.ledger import reconciliation
from apps.ledger.errors import InsufficientFunds
from apps.ledger.models import AccountKind, EntryReason, JournalEntry
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import funds_hold, system_account
from apps.ledger.tests.factories import UserFactory, fund
from apps.ledger.tests.forgery import flagged_entries
from apps.orders.models import Order, OrderStatus, Trade
from apps.orders.services import order_cancel
from apps.orders.tests.helpers import balance, place, refreshed

D = Decimal


def fee_revenue(asset) -> Decimal:
    from apps.ledger.models import Account

    return sum((a.balance for a in Account.objects.filter(kind=AccountKind.FEE_REVENUE, asset=asset)), Decimal(0))


def test_s1_partial_fill_with_price_improvement_then_cancel(btc_usdt, btc, usdt):
    trader, maker = UserFactory(), UserFactory()
    fund(trader, usdt, "40000")
    fund(maker, btc, "0.2")
    ask = place(maker, side="sell", price="59900", qty="0.2")

    bid = place(trader, side="buy", price="60000", qty="0.5", time_in_force="GTC")

    # Hold 30,000, fill 0.2 BTC at 59,900 = 11,980 USDT, in the same transaction.
    assert JournalEntry.objects.get(idempotency_key=f"order:{bid.id}:hold").reason == EntryReason.ORDER_HOLD
    trade = Trade.objects.get()
    assert (trade.price, trade.qty, trade.quote_qty) == (D("59900"), D("0.2"), D("11980"))
    assert balance(trader, btc) == (D("0.1998"), D("0"))
    assert balance(trader, usdt) == (D("10000"), D("18020"))
    bid = refreshed(bid)
    assert (bid.filled_qty, bid.remaining_qty, bid.status, bid.held_remaining) == (
        D("0.2"),
        D("0.3"),
        OrderStatus.PARTIALLY_FILLED,
        D("18020"),
    )
    assert balance(maker, usdt) == (D("11968.02"), D("0"))
    assert refreshed(ask).status == OrderStatus.FILLED
    assert fee_revenue(btc) == D("0.0002")
    assert fee_revenue(usdt) == D("11.98")

    cancelled = order_cancel(order_id=bid.id, user_id=trader.id)

    assert JournalEntry.objects.get(idempotency_key=f"order:{bid.id}:release").reason == EntryReason.ORDER_RELEASE
    assert balance(trader, usdt) == (D("28020"), D("0"))
    assert (cancelled.status, cancelled.held_remaining) == (OrderStatus.CANCELLED, D("0"))
    assert refreshed(bid).held_remaining == 0
    report = reconcile()
    assert report.ok, report.as_dict()
    # Nothing was lost: T paid exactly 11,980 USDT for 0.2 BTC.
    assert D("40000") - sum(balance(trader, usdt)) == D("11980")


def test_s2_full_fill_at_a_better_price_leaves_no_hold(btc_usdt, btc, usdt):
    trader, maker = UserFactory(), UserFactory()
    fund(trader, usdt, "30000")
    fund(maker, btc, "0.5")
    place(maker, side="sell", price="59000", qty="0.5")

    bid = place(trader, side="buy", price="60000", qty="0.5")

    assert bid.status == OrderStatus.FILLED
    assert refreshed(bid).held_remaining == 0
    assert balance(trader, usdt) == (D("500"), D("0"))
    assert balance(trader, btc) == (D("0.4995"), D("0"))
    assert reconcile().ok


@pytest.fixture
def pending_withdrawals(monkeypatch):
    """Play the wallets app's part in invariant 4: the holds of pending withdrawals, next to the open orders."""
    holds: dict[tuple[int, int], Decimal] = {}
    monkeypatch.setattr(reconciliation, "_hold_sources", [*reconciliation.hold_sources(), lambda scope: dict(holds)])
    return holds


def test_s4_funds_held_by_an_order_cannot_be_withdrawn(btc_usdt, usdt, pending_withdrawals):
    user = UserFactory()
    fund(user, usdt, "100")
    order = place(user, side="buy", price="80000", qty="0.001")  # holds 80 USDT
    assert (order.status, order.held_remaining) == (OrderStatus.OPEN, D("80"))
    assert balance(user, usdt) == (D("20"), D("80"))

    with pytest.raises(InsufficientFunds):
        funds_hold(
            user_id=user.id,
            asset=usdt,
            amount=D("30"),
            idempotency_key="withdrawal:1:hold",
            reason=EntryReason.WITHDRAWAL_HOLD,
        )
    withdrawal_hold = funds_hold(
        user_id=user.id,
        asset=usdt,
        amount=D("20"),
        idempotency_key="withdrawal:2:hold",
        reason=EntryReason.WITHDRAWAL_HOLD,
    )
    pending_withdrawals[(user.id, usdt.id)] = D("20")

    assert balance(user, usdt) == (D("0"), D("100"))
    assert refreshed(order).held_remaining == D("80")
    # The hold stands in for a withdrawal's (pending_withdrawals explains it), so no withdrawal backs its entry.
    assert flagged_entries(reconcile()) == {withdrawal_hold.id: "no such withdrawal"}
    assert [check.name for check in reconcile().checks if not check.ok] == ["wallet_entries_backed"]


def test_s9_a_rejected_order_leaves_no_trace_in_balances(btc_usdt, usdt):
    user = UserFactory()
    fund(user, usdt, "100")
    entries_before = JournalEntry.objects.count()

    with pytest.raises(InsufficientFunds) as raised:
        place(user, side="buy", price="60000", qty="1")

    assert raised.value.code == "insufficient_funds"
    assert balance(user, usdt) == (D("100"), D("0"))
    assert not Order.objects.exists()  # no order id handed out for an order that will never exist
    assert JournalEntry.objects.count() == entries_before
    assert system_account(AccountKind.EQUITY, usdt).balance == D("-100")  # only the funding ever moved
    assert reconcile().ok
