"""Reads: depth by price level, recent trades, a user's open and closed orders, a user's fills."""

from decimal import Decimal

import pytest

from apps.core.errors import DomainError, NotFound
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.selectors import (
    fills_for_user,
    order_book_depth,
    order_for_user,
    orders_for_user,
    recent_trades,
)
from apps.orders.services import order_cancel
from apps.orders.tests.helpers import place

D = Decimal


@pytest.fixture
def users(btc_usdt, btc, usdt):
    alice, bob = UserFactory(), UserFactory()
    for user in (alice, bob):
        fund(user, btc, "10")
        fund(user, usdt, "1000000")
    return alice, bob


def test_depth_aggregates_remaining_quantity_per_price_best_first(users, btc_usdt):
    alice, bob = users
    place(alice, side="buy", price="49000", qty="0.1")
    place(bob, side="buy", price="49000", qty="0.2")
    place(alice, side="buy", price="49500", qty="0.3")
    place(alice, side="sell", price="51000", qty="0.5")
    place(bob, side="sell", price="50500", qty="0.4")
    place(alice, side="buy", price="50500", qty="0.1")  # takes 0.1 of bob's ask

    depth = order_book_depth(market="BTC-USDT")

    assert depth.bids == [(D("49500"), D("0.3")), (D("49000"), D("0.3"))]
    assert depth.asks == [(D("50500"), D("0.3")), (D("51000"), D("0.5"))]
    assert depth.sequence == 6
    assert order_book_depth(market="BTC-USDT", limit=1).bids == [(D("49500"), D("0.3"))]


def test_depth_of_an_unknown_market_or_a_bad_limit(users):
    with pytest.raises(NotFound):
        order_book_depth(market="DOGE-USDT")
    with pytest.raises(DomainError) as raised:
        order_book_depth(market="BTC-USDT", limit=0)
    assert "limit" in raised.value.fields


def test_recent_trades_newest_first(users):
    alice, bob = users
    place(alice, side="sell", price="50000", qty="0.1")
    place(alice, side="sell", price="50001", qty="0.1")
    taker = place(bob, side="buy", price="50001", qty="0.2")
    second = place(bob, side="sell", price="40000", qty="0.05")
    place(alice, side="buy", price="40000", qty="0.05")

    trades = recent_trades(market="BTC-USDT")

    assert [t.id for t in trades] == [f"{second.id + 1}-1", f"{taker.id}-2", f"{taker.id}-1"]
    assert [t.taker_side for t in trades] == ["buy", "buy", "buy"]
    assert len(recent_trades(market="BTC-USDT", limit=2)) == 2


def test_orders_for_user_open_and_closed(users):
    alice, bob = users
    resting = place(alice, side="buy", price="40000", qty="0.1")
    cancelled = place(alice, side="buy", price="40000", qty="0.1")
    order_cancel(order_id=cancelled.id, user_id=alice.id)
    place(bob, side="buy", price="40000", qty="0.1")

    assert [o.id for o in orders_for_user(user_id=alice.id)] == [cancelled.id, resting.id]
    assert [o.id for o in orders_for_user(user_id=alice.id, status="open")] == [resting.id]
    assert [o.id for o in orders_for_user(user_id=alice.id, status="closed", market="BTC-USDT")] == [cancelled.id]
    assert list(orders_for_user(user_id=alice.id, market="ETH-USDT")) == []
    with pytest.raises(DomainError):
        orders_for_user(user_id=alice.id, status="done")
    assert order_for_user(user_id=alice.id, order_id=resting.id).id == resting.id
    with pytest.raises(NotFound):
        order_for_user(user_id=bob.id, order_id=resting.id)


def test_fills_for_user_from_each_side(users):
    alice, bob = users
    ask = place(alice, side="sell", price="50000", qty="0.1")
    bid = place(bob, side="buy", price="50000", qty="0.1")

    (maker_fill,) = fills_for_user(user_id=alice.id)
    (taker_fill,) = fills_for_user(user_id=bob.id, market="BTC-USDT")

    assert (maker_fill.order_id, maker_fill.side, maker_fill.liquidity, maker_fill.fee, maker_fill.fee_asset) == (
        ask.id,
        "sell",
        "maker",
        D("5"),
        "USDT",
    )
    assert (taker_fill.order_id, taker_fill.side, taker_fill.liquidity, taker_fill.fee, taker_fill.fee_asset) == (
        bid.id,
        "buy",
        "taker",
        D("0.0001"),
        "BTC",
    )
    assert maker_fill.id == taker_fill.id == f"{bid.id}-1"
    assert (taker_fill.price, taker_fill.qty, taker_fill.quote_qty) == (D("50000"), D("0.1"), D("5000"))
    assert fills_for_user(user_id=alice.id, market="ETH-USDT") == []
