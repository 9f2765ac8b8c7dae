"""Cancel: the remaining hold is released exactly once, under the market lock."""

from decimal import Decimal

import pytest
from django.db import transaction

from apps.core.errors import InvalidState, NotFound
from apps.ledger.models import JournalEntry
from apps.ledger.reconciliation import reconcile
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.models import EndReason, Market, OrderStatus
from apps.orders.services import open_orders_cancel, order_cancel
from apps.orders.tests.helpers import balance, place, refreshed

D = Decimal


@pytest.fixture
def resting(btc_usdt, usdt, user):
    fund(user, usdt, "10000")
    return place(user, side="buy", price="50000", qty="0.1")


def test_cancel_releases_the_remaining_hold(resting, user, usdt):
    cancelled = order_cancel(order_id=resting.id, user_id=user.id)

    assert (cancelled.status, cancelled.reject_reason, cancelled.held_remaining) == (
        OrderStatus.CANCELLED,
        EndReason.CANCELLED,
        D("0"),
    )
    release = JournalEntry.objects.get(idempotency_key=f"order:{resting.id}:release")
    assert max(p.amount for p in release.postings.all()) == D("5000")
    assert balance(user, usdt) == (D("10000"), D("0"))
    assert reconcile().ok


def test_a_second_cancel_is_refused_and_releases_nothing(resting, user, usdt):
    order_cancel(order_id=resting.id, user_id=user.id)

    with pytest.raises(InvalidState) as raised:
        order_cancel(order_id=resting.id, user_id=user.id)

    assert raised.value.status == 409
    assert JournalEntry.objects.filter(reference_type="order", reference_id=str(resting.id)).count() == 2
    assert balance(user, usdt) == (D("10000"), D("0"))


def test_a_filled_order_cannot_be_cancelled(resting, user, btc):
    seller = UserFactory()
    fund(seller, btc, "1")
    place(seller, side="sell", price="50000", qty="0.1")

    with pytest.raises(InvalidState):
        order_cancel(order_id=resting.id, user_id=user.id)
    assert refreshed(resting).status == OrderStatus.FILLED


def test_another_users_order_or_an_unknown_one_is_not_found(resting):
    sequence = Market.objects.get().sequence
    with pytest.raises(NotFound):
        order_cancel(order_id=resting.id, user_id=UserFactory().id)
    with pytest.raises(NotFound):
        order_cancel(order_id=resting.id + 1000)
    assert refreshed(resting).status == OrderStatus.OPEN
    assert Market.objects.get().sequence == sequence  # the refused cancel's writes were undone


def test_an_operator_cancel_is_recorded_as_such(resting):
    cancelled = order_cancel(order_id=resting.id, by_operator=True)
    assert cancelled.reject_reason == EndReason.CANCELLED_BY_OPERATOR


def test_a_refusal_inside_a_callers_transaction_leaves_that_transaction_usable(resting, user, usdt):
    order_cancel(order_id=resting.id, user_id=user.id)
    with transaction.atomic():
        with pytest.raises(InvalidState):
            order_cancel(order_id=resting.id, user_id=user.id)
        again = place(user, side="buy", price="50000", qty="0.1")
    assert refreshed(again).status == OrderStatus.OPEN
    assert balance(user, usdt) == (D("5000"), D("5000"))


def test_a_cancel_of_open_orders_takes_the_users_open_orders_on_that_market_only(resting, user, usdt):
    second = place(user, side="buy", price="49000", qty="0.1")
    other = UserFactory()
    fund(other, usdt, "10000")
    others = place(other, side="buy", price="49000", qty="0.1")

    cancelled = open_orders_cancel(user_id=user.id, market="BTC-USDT")

    assert [(o.id, o.status) for o in cancelled] == [(resting.id, "cancelled"), (second.id, "cancelled")]
    assert refreshed(others).status == OrderStatus.OPEN
    assert balance(user, usdt) == (D("10000"), D("0"))
    assert open_orders_cancel(user_id=user.id, market="BTC-USDT") == []
    with pytest.raises(NotFound):
        open_orders_cancel(user_id=user.id, market="DOGE-USDT")
    assert reconcile().ok
