"""Self-trade prevention: a prevented match makes no trade and charges no fee."""

from decimal import Decimal

import pytest

from apps.ledger.models import Account, AccountKind
from apps.ledger.reconciliation import reconcile
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.models import EndReason, OrderStatus, Trade
from apps.orders.tests.helpers import balance, place, refreshed

D = Decimal


def fee_revenue() -> dict[str, Decimal]:
    totals: dict[str, Decimal] = {}
    for account in Account.objects.filter(kind=AccountKind.FEE_REVENUE).select_related("asset"):
        totals[account.asset.code] = totals.get(account.asset.code, D(0)) + account.balance
    return totals


@pytest.fixture
def book(btc_usdt, btc, usdt):
    """``self_`` rests an ask 0.1 at 50,000 (best); ``other`` an ask 0.1 at 50,010."""
    self_, other = UserFactory(), UserFactory()
    fund(self_, btc, "1")
    fund(self_, usdt, "100000")
    fund(other, btc, "1")
    own_ask = place(self_, side="sell", price="50000", qty="0.1")
    other_ask = place(other, side="sell", price="50010", qty="0.1")
    return self_, other, own_ask, other_ask


def test_expire_taker_is_the_default_and_leaves_the_resting_order(book, btc, usdt):
    self_, other, own_ask, other_ask = book

    order = place(self_, side="buy", price="50010", qty="0.2")

    assert (order.stp, order.status, order.reject_reason) == (
        "expire_taker",
        OrderStatus.EXPIRED,
        EndReason.SELF_TRADE_PREVENTION,
    )
    assert (order.filled_qty, order.held_remaining) == (D("0"), D("0"))
    assert not Trade.objects.exists()
    assert fee_revenue() == {}
    assert refreshed(own_ask).status == OrderStatus.OPEN
    assert refreshed(other_ask).status == OrderStatus.OPEN
    assert balance(self_, usdt) == (D("100000"), D("0"))
    assert balance(self_, btc) == (D("0.9"), D("0.1"))
    assert reconcile().ok


def test_expire_taker_after_a_partial_fill_releases_the_rest(btc_usdt, btc, usdt):
    self_, other = UserFactory(), UserFactory()
    fund(self_, btc, "1")
    fund(self_, usdt, "100000")
    fund(other, btc, "1")
    place(other, side="sell", price="50000", qty="0.1")
    place(self_, side="sell", price="50005", qty="0.1")

    order = place(self_, side="buy", price="50010", qty="0.2", stp="expire_taker")

    assert (order.status, order.filled_qty, order.held_remaining) == (OrderStatus.EXPIRED, D("0.1"), D("0"))
    assert Trade.objects.count() == 1
    assert balance(self_, usdt) == (D("95000"), D("0"))
    assert reconcile().ok


def test_expire_maker_expires_the_own_resting_order_and_fills_the_next(book, btc, usdt):
    self_, other, own_ask, other_ask = book

    order = place(self_, side="buy", price="50010", qty="0.1", stp="expire_maker")

    own_ask = refreshed(own_ask)
    assert (own_ask.status, own_ask.reject_reason, own_ask.held_remaining) == (
        OrderStatus.EXPIRED,
        EndReason.SELF_TRADE_PREVENTION,
        D("0"),
    )
    assert (order.status, order.filled_qty, order.filled_quote_qty) == (OrderStatus.FILLED, D("0.1"), D("5001"))
    trade = Trade.objects.get()
    assert (trade.maker_order_id, trade.maker_user_id) == (other_ask.id, other.id)
    # Only the real trade pays fees: 0.0001 BTC from the buyer, 5.001 USDT from the seller.
    assert fee_revenue() == {"BTC": D("0.0001"), "USDT": D("5.001")}
    assert balance(self_, btc) == (D("1") + D("0.0999"), D("0"))
    assert balance(self_, usdt) == (D("100000") - D("5001"), D("0"))
    assert reconcile().ok


def test_expire_both_expires_both_orders_without_a_trade(book, btc, usdt):
    self_, other, own_ask, other_ask = book

    order = place(self_, side="buy", price="50010", qty="0.1", stp="expire_both")

    assert (order.status, order.reject_reason) == (OrderStatus.EXPIRED, EndReason.SELF_TRADE_PREVENTION)
    assert refreshed(own_ask).status == OrderStatus.EXPIRED
    assert refreshed(other_ask).status == OrderStatus.OPEN
    assert not Trade.objects.exists()
    assert fee_revenue() == {}
    assert balance(self_, btc) == (D("1"), D("0"))
    assert balance(self_, usdt) == (D("100000"), D("0"))
    assert reconcile().ok


def test_fok_stopped_by_self_trade_prevention_is_rejected_and_expires_nothing(book):
    from apps.orders.errors import FokNotFillable

    self_, other, own_ask, other_ask = book

    with pytest.raises(FokNotFillable):
        place(self_, side="buy", price="50010", qty="0.2", stp="expire_maker", time_in_force="FOK")

    assert refreshed(own_ask).status == OrderStatus.OPEN
