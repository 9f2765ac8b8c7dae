"""The matching arithmetic on its own: no database."""

from decimal import Decimal

import pytest

from apps.orders.engine.matching import Maker, Stop, Taker, plan_match

D = Decimal


def maker(id_, price, qty, user_id=None, side="sell"):
    return Maker(
        id=id_,
        user_id=user_id or 100 + id_,
        side=side,
        price=D(price),
        qty=D(qty),
        filled_qty=D(0),
        filled_quote_qty=D(0),
        fee_total=D(0),
        held_remaining=D(qty),
        fee_rate=D("0.001"),
    )


class Counting:
    """An iterable of makers that counts how many were taken (the book is read lazily)."""

    def __init__(self, makers):
        self.makers = makers
        self.taken = 0

    def __iter__(self):
        for m in self.makers:
            self.taken += 1
            yield m


def test_a_taker_reads_no_more_resting_orders_than_it_needs():
    book = Counting([maker(1, "100", "1"), maker(2, "101", "1"), maker(3, "102", "1")])
    plan = plan_match(Taker(1, "buy", D("105"), D("1.5"), None), book, step_size=D("0.1"))
    assert [(f.maker.id, f.qty, f.quote_qty) for f in plan.fills] == [(1, D("1"), D("100")), (2, D("0.5"), D("50.5"))]
    assert plan.stop is Stop.FILLED
    assert book.taken == 2


def test_limit_price_stops_matching():
    plan = plan_match(
        Taker(1, "buy", D("100"), D("3"), None), [maker(1, "100", "1"), maker(2, "101", "1")], step_size=D("1")
    )
    assert (plan.filled_qty, plan.stop) == (D("1"), Stop.BOOK)


def test_sell_taker_crosses_bids_at_or_above_its_price():
    bids = [maker(1, "101", "1", side="buy"), maker(2, "99", "1", side="buy")]
    plan = plan_match(Taker(1, "sell", D("100"), D("2"), None), bids, step_size=D("1"))
    assert [f.price for f in plan.fills] == [D("101")]


def test_a_budget_buys_whole_steps_and_stops_inside_a_resting_order():
    plan = plan_match(
        Taker(1, "buy", None, None, D("250")), [maker(1, "100", "1"), maker(2, "120", "5")], step_size=D("0.1")
    )
    # 100 for 1 at 100; 150 left buys 1.2 at 120 = 144; 6 left cannot buy 0.1 at 120 (12).
    assert [(f.qty, f.quote_qty) for f in plan.fills] == [(D("1"), D("100")), (D("1.2"), D("144.0"))]
    assert plan.stop is Stop.BUDGET


def test_a_budget_spent_exactly_is_filled():
    plan = plan_match(
        Taker(1, "buy", None, None, D("150")), [maker(1, "100", "1"), maker(2, "50", "5")], step_size=D("1")
    )
    assert (plan.filled_quote_qty, plan.stop) == (D("150"), Stop.FILLED)


@pytest.mark.parametrize(
    ("stp", "fills", "expired", "stop"),
    [
        ("expire_taker", [], [], Stop.SELF_TRADE),
        ("expire_maker", [3], [1, 2], Stop.FILLED),
        ("expire_both", [], [1], Stop.SELF_TRADE),
    ],
)
def test_self_trade_prevention_modes(stp, fills, expired, stop):
    book = [maker(1, "100", "1", user_id=7), maker(2, "100", "1", user_id=7), maker(3, "101", "1")]
    plan = plan_match(Taker(7, "buy", D("101"), D("1"), None, stp=stp), book, step_size=D("1"))
    assert [f.maker.id for f in plan.fills] == fills
    assert [m.id for m in plan.expired_makers] == expired
    assert plan.stop is stop
    assert plan.first_price == D("100")
