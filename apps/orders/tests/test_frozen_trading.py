"""An operator's trading freeze: order_place refuses new orders (``trading_frozen``); open orders stay cancellable."""

from decimal import Decimal

import pytest

from apps.accounts.errors import TradingFrozen
from apps.accounts.models import AccountRestriction
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.models import Order, OrderStatus
from apps.orders.services import order_cancel, placement

from .helpers import balance, place

D = Decimal


@pytest.fixture
def trader(btc_usdt, usdt):
    trader = UserFactory()
    fund(trader, usdt, "1000")
    return trader


def freeze(user, frozen=True):
    AccountRestriction.objects.update_or_create(
        user=user,
        defaults={"trading_frozen": frozen, "trading_reason": "fraud review", "updated_by": UserFactory(is_staff=True)},
    )


def test_a_frozen_account_cannot_place_an_order_and_nothing_is_held(trader, usdt):
    freeze(trader)
    with pytest.raises(TradingFrozen) as raised:
        place(trader, side="buy", price="100", qty="1")
    assert (raised.value.code, raised.value.status) == ("trading_frozen", 403)
    assert not Order.objects.filter(user=trader).exists()
    assert balance(trader, usdt) == (D("1000"), D("0"))


def test_open_orders_stay_cancellable_and_unfreezing_allows_orders_again(trader, usdt):
    resting = place(trader, side="buy", price="100", qty="1")
    freeze(trader)

    cancelled = order_cancel(order_id=resting.id, user_id=trader.id)

    assert cancelled.status == OrderStatus.CANCELLED
    assert balance(trader, usdt) == (D("1000"), D("0"))
    freeze(trader, frozen=False)
    assert place(trader, side="buy", price="100", qty="1").status == OrderStatus.OPEN


def test_the_api_answers_403_with_the_stable_code(trader, api_as):
    freeze(trader)
    response = api_as(trader, "trade").post(
        "/api/v1/orders/",
        {"market": "BTC-USDT", "side": "buy", "type": "limit", "price": "100", "qty": "1"},
        format="json",
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "trading_frozen"
    assert not Order.objects.filter(user=trader).exists()


def test_the_freeze_is_read_whether_or_not_the_market_shape_is_cached(trader, usdt, monkeypatch):
    other = UserFactory()
    fund(other, usdt, "1000")
    freeze(trader)
    monkeypatch.setattr(placement, "SHAPES", {})  # the first order of this process on the market: no pipeline

    with pytest.raises(TradingFrozen):
        place(trader, side="buy", price="100", qty="1")
    place(other, side="buy", price="100", qty="1")  # caches the shape
    assert "BTC-USDT" in placement.SHAPES
    with pytest.raises(TradingFrozen):
        place(trader, side="buy", price="100", qty="1")  # the lock, the book page and the freeze in one round trip

    assert not Order.objects.filter(user=trader).exists()


def test_a_replay_is_answered_from_the_database_only_for_the_same_order_of_an_unfrozen_account(trader):
    arguments = {"type": "limit", "quote_qty": None, "time_in_force": None, "post_only": False, "stp": None}
    order = {**arguments, "side": "buy", "price": "4000", "qty": "0.1", "client_order_id": "c-1"}
    placed = placement.order_place(user_id=trader.id, market="BTC-USDT", **order)
    order_replay = placement.order_replay

    replayed = order_replay(user_id=trader.id, market="BTC-USDT", **{**order, "price": "4000.0"})
    assert replayed is not None and replayed.id == placed.id
    assert order_replay(user_id=trader.id, market="BTC-USDT", **{**order, "qty": "0.2"}) is None  # a conflict
    assert order_replay(user_id=trader.id, market="ETH-USDT", **order) is None  # named on another market
    assert order_replay(user_id=trader.id, market="BTC-USDT", **{**order, "price": "4000.001"}) is None
    assert order_replay(user_id=trader.id, market="BTC-USDT", **{**order, "client_order_id": "c-2"}) is None
    freeze(trader)
    assert order_replay(user_id=trader.id, market="BTC-USDT", **order) is None  # refused first, by order_place
