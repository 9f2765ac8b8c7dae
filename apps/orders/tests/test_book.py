"""The in-memory book and the batch planner (apps.orders.engine.book, .batch) without a database."""

from dataclasses import dataclass
from decimal import Decimal

import pytest

from apps.core.errors import NotFound
from apps.ledger.errors import InsufficientFunds
from apps.orders.engine.batch import BatchPlanner, Cancel, Hold, Place, Rates, Release, Request, TradeRow
from apps.orders.engine.book import OrderBook
from apps.orders.engine.matching import Maker, Taker, plan_match
from apps.orders.errors import MarketHalted

D = Decimal


def maker(order_id, side, price, qty, user=1, filled="0"):
    held = D(qty) * D(price) if side == "buy" else D(qty)
    return Maker(order_id, user, side, D(price), D(qty), D(filled), D(0), D(0), held, D("0.001"))


def test_the_book_walks_a_side_best_price_first_and_oldest_first_within_a_price():
    book = OrderBook([maker(3, "sell", "101", "1"), maker(1, "sell", "100", "1"), maker(2, "sell", "101", "1")])
    book.add(maker(4, "sell", "100", "1"))
    book.add(maker(5, "buy", "99", "1"))
    book.add(maker(6, "buy", "99.5", "1"))

    assert [m.id for m in book.makers("sell")] == [1, 4, 2, 3]
    assert [m.id for m in book.makers("buy")] == [6, 5]
    assert [m.id for m in book.makers("sell", D("100"))] == [1, 4]
    assert [m.id for m in book.makers("buy", D("99.5"))] == [6]
    assert book.best("sell") == (D("100"), D("2"))
    assert book.best("buy") == (D("99.5"), D("1"))


def test_the_book_knows_the_owners_of_its_resting_orders_as_they_come_and_go():
    book = OrderBook([maker(1, "sell", "100", "1", user=7), maker(2, "buy", "99", "1", user=8)])
    book.add(maker(3, "sell", "101", "1", user=7))
    assert book.user_ids() == {7, 8}
    book.remove(1)
    assert book.user_ids() == {7, 8}  # order 3 still rests for user 7
    book.remove(3)
    book.remove(2)
    assert book.user_ids() == set()


def test_removing_the_last_order_of_a_level_removes_the_level():
    book = OrderBook([maker(1, "sell", "100", "1"), maker(2, "sell", "101", "1")])
    assert book.remove(1).id == 1
    assert book.best("sell") == (D("101"), D("1"))
    assert book.level_qty("sell", D("100")) == 0
    assert 1 not in book and len(book) == 1
    with pytest.raises(KeyError):
        book.remove(1)
    with pytest.raises(ValueError):
        book.add(maker(2, "sell", "101", "1"))


def test_a_fill_in_place_changes_the_level_quantity_once_the_order_is_refreshed():
    resting = maker(1, "buy", "100", "2")
    book = OrderBook([resting, maker(2, "buy", "100", "1", filled="0.25")])
    assert book.level_qty("buy", D("100")) == D("2.75")
    resting.filled_qty = D("0.5")
    book.refresh(1)
    assert book.level_qty("buy", D("100")) == D("2.25")
    resting.filled_qty = D("1.5")
    book.refresh(1)
    book.refresh(1)  # counting again without a fill changes nothing
    assert book.level_qty("buy", D("100")) == D("1.25")
    assert book.best("buy") == (D("100"), D("1.25"))
    with pytest.raises(KeyError):
        book.refresh(3)


def test_the_level_totals_follow_adds_fills_and_removes():
    book = OrderBook([maker(1, "sell", "100", "1"), maker(2, "sell", "100", "2"), maker(3, "sell", "101", "4")])
    book.add(maker(4, "sell", "100", "0.5", filled="0.1"))
    assert book.level_qty("sell", D("100")) == D("3.4")
    book.get(2).filled_qty = D("1.75")
    book.refresh(2)
    assert book.remove(1).id == 1  # removed at what the book counted for it
    assert book.level_qty("sell", D("100")) == D("0.65")
    book.get(4).filled_qty = D("0.5")  # filled: the planner refreshes, then removes it
    book.refresh(4)
    book.remove(4)
    assert book.level_qty("sell", D("100")) == D("0.25")
    book.remove(2)
    assert book.level_qty("sell", D("100")) == 0 and book.best("sell") == (D("101"), D("4"))
    book.add(maker(5, "sell", "100", "3"))  # a level emptied and used again starts from zero
    assert book.level_qty("sell", D("100")) == D("3")


def level_totals_match_the_orders(book):
    for side in ("buy", "sell"):
        for price, level in book.sides[side].levels.items():
            assert book.level_qty(side, price) == sum((m.remaining for m in level.values()), D(0))


def test_plan_match_walks_the_book_as_it_walks_a_list():
    makers = [maker(1, "sell", "100", "1", user=2), maker(2, "sell", "101", "1", user=3)]
    book = OrderBook(makers)
    taker = Taker(1, "buy", D("101"), D("1.5"), None)
    from_book = plan_match(taker, book.makers("sell", D("101")), step_size=D("0.1"))
    from_list = plan_match(taker, makers, step_size=D("0.1"))
    assert [(f.maker.id, f.qty) for f in from_book.fills] == [(f.maker.id, f.qty) for f in from_list.fills]


@dataclass(frozen=True)
class Terms:
    id: int = 1
    symbol: str = "BTC-USDT"
    status: str = "active"
    base_id: int = 10
    quote_id: int = 20
    step_size: Decimal = D("0.1")
    market_order_price_band: Decimal | None = None
    base_code: str = "BTC"
    base_decimals: int = 8
    quote_code: str = "USDT"
    quote_decimals: int = 6


class NoFilters:
    def limits(self, request):
        pass

    def notional(self, request, plan):
        pass


def request(user, side, price, qty, **more):
    values = {"type": "limit", "quote_qty": None, "time_in_force": "GTC", "post_only": False}
    values |= {"stp": "expire_taker", "client_order_id": ""} | more
    return Request(user_id=user, side=side, price=D(price), qty=D(qty), **values)


def planner(book, balances, market=Terms()):
    return BatchPlanner(
        book=book, market=market, filters=NoFilters(), balances=balances, rates=Rates(default=(D("0.001"), D("0.002")))
    )


def test_an_order_that_cannot_be_held_is_refused_on_its_own_and_the_batch_goes_on():
    book = OrderBook([maker(1, "sell", "100", "1", user=9)])
    balances = {(1, 20): D("150"), (1, 10): D(0)}
    plan = planner(book, balances).run(
        [
            Place(request(1, "buy", "100", "1"), 101),  # holds 100: 50 left
            Place(request(1, "buy", "100", "1"), 102),  # needs 100: refused
            Place(request(1, "buy", "50", "1"), 103),  # holds the last 50: rests
        ]
    )
    assert plan.outcomes[0] == 101 and plan.outcomes[2] == 103
    assert isinstance(plan.outcomes[1], InsufficientFunds)
    assert plan.outcomes[1].message == "Insufficient USDT: 50.000000 available, 100.000000 needed."
    assert [type(e) for e in plan.entries] == [Hold, TradeRow, Hold]
    assert [c.offset for c in plan.changes] == [1, 2]  # a refusal bumps nothing
    assert plan.placed[101].status == "filled" and plan.placed[103].status == "open"
    assert [m.id for m in book.makers("buy")] == [103] and not list(book.makers("sell"))
    assert plan.updated[1].status == "filled"


def test_what_a_fill_pays_out_can_be_held_by_the_next_command():
    book = OrderBook([maker(1, "buy", "100", "1", user=9)])
    balances = {(1, 10): D("1"), (1, 20): D(0)}
    plan = planner(book, balances).run(
        [
            Place(request(1, "sell", "100", "1"), 101),  # receives 100 - 0.2 fee USDT
            Place(request(1, "buy", "99", "1"), 102),  # holds 99 of it
        ]
    )
    assert plan.outcomes == [101, 102]
    assert balances == {(1, 10): D(0), (1, 20): D("0.8")}  # tracked as planned: 100 - 0.2 fee - 99 held
    assert plan.placed[101].fee_total == D("0.2")


def test_the_planner_keeps_the_level_totals_of_the_makers_it_fills():
    book = OrderBook(
        [
            maker(1, "sell", "100", "1", user=9),
            maker(2, "sell", "100", "2", user=8),
            maker(3, "sell", "101", "1", user=9),
        ]
    )
    plan = planner(book, {(1, 20): D("1000"), (1, 10): D(0)}).run(
        [
            Place(request(1, "buy", "100", "1.5"), 101),  # fills 1 and half of 2
            Place(request(1, "buy", "101", "0.25"), 102),  # a quarter more of 2
            Place(request(1, "sell", "102", "1"), 103),  # rests on another side
        ]
    )
    assert plan.outcomes == [101, 102, 103]
    assert book.level_qty("sell", D("100")) == D("1.25")
    assert [c.levels for c in plan.changes[:2]] == [
        [("buy", D("100"), D(0)), ("sell", D("100"), D("1.5"))],
        [("buy", D("101"), D(0)), ("sell", D("100"), D("1.25"))],
    ]
    level_totals_match_the_orders(book)


def test_a_cancel_in_the_batch_releases_what_the_order_still_holds():
    book = OrderBook([maker(1, "buy", "100", "2", user=9)])
    plan = planner(book, {(1, 10): D(1)}).run(
        [Place(request(1, "sell", "100", "0.5"), 101), Cancel(1, 9, False), Cancel(1, 9, False), Cancel(7, None, True)]
    )
    assert plan.outcomes[:2] == [101, 1]
    assert [type(e) for e in plan.entries[-1:]] == [Release] and plan.entries[-1].amount == D("150")
    assert plan.outcomes[2].code == "invalid_state"
    assert isinstance(plan.outcomes[3], NotFound)
    assert plan.updated[1].status == "cancelled" and plan.updated[1].held_remaining == 0


def test_a_halted_market_refuses_placements_but_not_cancels():
    book = OrderBook([maker(1, "buy", "100", "2", user=9)])
    plan = planner(book, {(1, 10): D(5)}, market=Terms(status="halted")).run(
        [Place(request(1, "sell", "100", "0.5"), 101), Cancel(1, None, True)]
    )
    assert isinstance(plan.outcomes[0], MarketHalted)
    assert plan.outcomes[1] == 1 and plan.updated[1].reject_reason == "cancelled_by_operator"
