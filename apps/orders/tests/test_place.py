"""Order placement: filters, types and options, each with exact balances afterwards."""

from decimal import Decimal

import pytest

from apps.core.errors import DomainError, NotFound
from apps.ledger.errors import IdempotencyConflict, InsufficientFunds
from apps.ledger.models import JournalEntry
from apps.ledger.reconciliation import reconcile
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.errors import (
    FokNotFillable,
    InvalidPrice,
    InvalidQuantity,
    MarketHalted,
    MaxNotional,
    MinNotional,
    PostOnlyWouldTake,
)
from apps.orders.models import EndReason, Market, Order, OrderStatus, Trade
from apps.orders.services import market_filters_update, market_halt, market_resume
from apps.orders.tests.helpers import balance, place, refreshed

D = Decimal


@pytest.fixture
def trader(btc, usdt):
    user = UserFactory()
    fund(user, usdt, "100000")
    fund(user, btc, "10")
    return user


@pytest.fixture
def maker(btc, usdt):
    user = UserFactory()
    fund(user, usdt, "100000")
    fund(user, btc, "10")
    return user


def entry_keys() -> set[str]:
    return set(JournalEntry.objects.values_list("idempotency_key", flat=True))


def book_state():
    return list(Order.objects.order_by("id").values_list("id", "status", "filled_qty", "held_remaining"))


REJECTIONS = [
    ({"side": "buy", "price": "60000.001", "qty": "0.1"}, InvalidPrice, "price"),
    ({"side": "buy", "price": "60000.0000001", "qty": "0.1"}, InvalidPrice, "price"),
    ({"side": "buy", "price": "-60000", "qty": "0.1"}, InvalidPrice, "price"),
    ({"side": "buy", "price": "6E4", "qty": "0.1"}, InvalidPrice, "price"),
    ({"side": "buy", "price": 60000.0, "qty": "0.1"}, InvalidPrice, "price"),
    ({"side": "buy", "qty": "0.1"}, InvalidPrice, "price"),
    ({"side": "buy", "price": "60000", "qty": "0.00001"}, InvalidQuantity, "qty"),
    ({"side": "buy", "price": "60000", "qty": "0.000000001"}, InvalidQuantity, "qty"),
    ({"side": "buy", "price": "60000", "qty": "0"}, InvalidQuantity, "qty"),
    ({"side": "buy", "price": "60000", "qty": "1000.0001"}, InvalidQuantity, "qty"),
    ({"side": "buy", "price": "60000", "qty": "NaN"}, InvalidQuantity, "qty"),
    ({"side": "buy", "price": "60000"}, InvalidQuantity, "qty"),
    ({"side": "buy", "price": "100", "qty": "0.0001"}, MinNotional, "qty"),
    ({"side": "buy", "type": "market", "quote_qty": "0.99"}, MinNotional, "quote_qty"),
    ({"side": "buy", "type": "market", "quote_qty": "10.0000001"}, InvalidQuantity, "quote_qty"),
    ({"side": "buy", "type": "market", "qty": "0.1", "quote_qty": "100"}, InvalidQuantity, "qty"),
    ({"side": "buy", "type": "market"}, InvalidQuantity, "quote_qty"),
    ({"side": "sell", "type": "market", "quote_qty": "100"}, InvalidQuantity, "quote_qty"),
    ({"side": "sell", "type": "market"}, InvalidQuantity, "qty"),
    ({"side": "buy", "type": "market", "price": "60000", "qty": "0.1"}, InvalidPrice, "price"),
    ({"side": "buy", "price": "60000", "qty": "0.1", "quote_qty": "10"}, InvalidQuantity, "quote_qty"),
    ({"side": "up", "price": "60000", "qty": "0.1"}, DomainError, "side"),
    ({"side": "buy", "type": "stop", "price": "60000", "qty": "0.1"}, DomainError, "type"),
    ({"side": "buy", "price": "60000", "qty": "0.1", "time_in_force": "GTD"}, DomainError, "time_in_force"),
    ({"side": "buy", "type": "market", "qty": "0.1", "time_in_force": "GTC"}, DomainError, "time_in_force"),
    ({"side": "buy", "price": "60000", "qty": "0.1", "stp": "none"}, DomainError, "stp"),
    (
        {"side": "buy", "price": "60000", "qty": "0.1", "post_only": True, "time_in_force": "IOC"},
        DomainError,
        "time_in_force",
    ),
    ({"side": "buy", "type": "market", "quote_qty": "100", "post_only": True}, DomainError, "post_only"),
    ({"side": "buy", "price": "60000", "qty": "0.1", "post_only": "yes"}, DomainError, "post_only"),
    ({"side": "buy", "price": "60000", "qty": "0.1", "client_order_id": "x" * 65}, DomainError, "client_order_id"),
]


@pytest.mark.parametrize(("kwargs", "error", "field"), REJECTIONS)
def test_a_rejected_order_names_the_field_and_writes_nothing(btc_usdt, btc, usdt, trader, maker, kwargs, error, field):
    place(maker, side="sell", price="61000", qty="1")
    before = (entry_keys(), book_state(), balance(trader, usdt), balance(trader, btc), Market.objects.get().sequence)

    with pytest.raises(error) as raised:
        place(trader, **kwargs)

    assert type(raised.value) is error
    assert field in raised.value.fields, raised.value.fields
    assert raised.value.status == 400
    after = (entry_keys(), book_state(), balance(trader, usdt), balance(trader, btc), Market.objects.get().sequence)
    assert after == before


def test_error_codes_are_the_api_codes():
    assert [
        cls.code
        for cls in (InvalidPrice, InvalidQuantity, MinNotional, MarketHalted, PostOnlyWouldTake, FokNotFillable)
    ] == [
        "invalid_price",
        "invalid_quantity",
        "min_notional",
        "market_halted",
        "post_only_would_take",
        "fok_not_fillable",
    ]


def test_quantity_limits_follow_the_market_filters(btc_usdt, trader):
    market_filters_update(market_id=btc_usdt.id, min_qty=D("0.01"), max_qty=D("2"), min_notional=D("10"))

    with pytest.raises(InvalidQuantity, match="at least 0.01"):
        place(trader, side="buy", price="60000", qty="0.0099")
    with pytest.raises(InvalidQuantity, match="at most 2"):
        place(trader, side="buy", price="60000", qty="2.0001")
    with pytest.raises(MinNotional):
        place(trader, side="buy", price="999.99", qty="0.01")
    assert place(trader, side="buy", price="1000", qty="0.01").status == OrderStatus.OPEN


def test_a_limit_order_worth_more_than_the_largest_amount_of_the_quote_is_refused(btc_usdt, trader):
    """Break-it review: a sell of 20 at 99999999999999999999.99 (2e21 USDT, above exchangeInfo's maxNotional) was
    accepted and rested where no buyer could ever pay it; the value one quantum below 10^20 is the largest."""
    market_filters_update(market_id=btc_usdt.id, min_qty=D("0.0001"), max_qty=D("1000"), min_notional=D("1"))
    with pytest.raises(MaxNotional, match="above the maximum 99999999999999999999.999999") as raised:
        place(trader, side="sell", price="99999999999999999999.99", qty="2")
    with pytest.raises(MaxNotional):
        place(trader, side="buy", price="10000000000000000000", qty="10")

    assert raised.value.fields == {"qty": raised.value.message} and raised.value.code == "max_notional"
    assert not Order.objects.exists()


def test_unknown_market_is_not_found(btc_usdt, trader):
    with pytest.raises(NotFound) as raised:
        place(trader, market="ETH-USDT", side="buy", price="1", qty="1")
    assert "market" in raised.value.fields


def test_halted_market_refuses_orders_but_accepts_cancels(btc_usdt, trader, usdt):
    from apps.orders.services import order_cancel

    resting = place(trader, side="buy", price="50000", qty="0.1")
    operator = UserFactory()
    market_halt(market_id=btc_usdt.id, operator_id=operator.id, reason="test")

    with pytest.raises(MarketHalted) as raised:
        place(trader, side="buy", price="50000", qty="0.1")
    assert raised.value.fields == {"market": raised.value.message}
    assert raised.value.status == 409
    assert order_cancel(order_id=resting.id, user_id=trader.id).status == OrderStatus.CANCELLED
    assert balance(trader, usdt) == (D("100000"), D("0"))

    market_resume(market_id=btc_usdt.id, operator_id=operator.id, reason="test")
    assert place(trader, side="buy", price="50000", qty="0.1").status == OrderStatus.OPEN


def test_price_time_priority_best_price_first_then_oldest(btc_usdt, trader):
    first, second, better = UserFactory(), UserFactory(), UserFactory()
    for user in (first, second, better):
        fund(user, btc_usdt.base, "1")
    a = place(first, side="sell", price="50010", qty="0.1")
    b = place(second, side="sell", price="50010", qty="0.1")
    c = place(better, side="sell", price="50000", qty="0.1")

    place(trader, side="buy", price="50010", qty="0.25")

    trades = list(Trade.objects.order_by("seq").values_list("maker_order_id", "price", "qty"))
    assert trades == [(c.id, D("50000"), D("0.1")), (a.id, D("50010"), D("0.1")), (b.id, D("50010"), D("0.05"))]
    assert refreshed(b).status == OrderStatus.PARTIALLY_FILLED
    assert refreshed(b).held_remaining == D("0.05")


def test_a_taker_sell_fills_at_the_resting_bid_price(btc_usdt, trader, maker, btc, usdt):
    place(maker, side="buy", price="60000", qty="0.1")

    order = place(trader, side="sell", price="59000", qty="0.1")

    assert (order.status, order.filled_quote_qty, order.fee_total) == (OrderStatus.FILLED, D("6000"), D("6"))
    assert balance(trader, usdt) == (D("100000") + D("5994"), D("0"))
    assert balance(trader, btc) == (D("9.9"), D("0"))
    assert balance(maker, btc) == (D("10.0999"), D("0"))
    assert balance(maker, usdt) == (D("94000"), D("0"))


def test_a_resting_bid_filled_later_as_maker_releases_its_earlier_price_improvement(btc_usdt, btc, usdt):
    buyer, seller_early, seller_late = UserFactory(), UserFactory(), UserFactory()
    fund(buyer, usdt, "12000")
    fund(seller_early, btc, "0.1")
    fund(seller_late, btc, "0.1")
    place(seller_early, side="sell", price="59000", qty="0.1")

    bid = place(buyer, side="buy", price="60000", qty="0.2")  # holds 12,000; 0.1 fills for 5,900
    assert (bid.status, bid.held_remaining) == (OrderStatus.PARTIALLY_FILLED, D("6100"))
    place(seller_late, side="sell", price="60000", qty="0.1")  # fills the rest at 60,000 = 6,000

    bid = refreshed(bid)
    assert (bid.status, bid.held_remaining, bid.filled_quote_qty) == (OrderStatus.FILLED, D("0"), D("11900"))
    assert JournalEntry.objects.filter(idempotency_key=f"order:{bid.id}:release").exists()
    assert balance(buyer, usdt) == (D("100"), D("0"))
    assert balance(buyer, btc) == (D("0.1998"), D("0"))  # 0.1 - 0.0001 as taker, 0.1 - 0.0001 as maker
    assert reconcile().ok


def test_market_buy_with_a_budget_larger_than_the_book_releases_the_rest(btc_usdt, trader, maker, btc, usdt):
    place(maker, side="sell", price="50000", qty="0.1")
    place(maker, side="sell", price="50010", qty="0.2")

    order = place(trader, side="buy", type="market", quote_qty="20000")

    assert (order.status, order.reject_reason) == (OrderStatus.EXPIRED, EndReason.NO_LIQUIDITY)
    assert (order.filled_qty, order.filled_quote_qty, order.held_remaining) == (D("0.3"), D("15002"), D("0"))
    assert balance(trader, usdt) == (D("100000") - D("15002"), D("0"))
    assert balance(trader, btc) == (D("10") + D("0.3") - D("0.0003"), D("0"))
    release = JournalEntry.objects.get(idempotency_key=f"order:{order.id}:release")
    assert max(p.amount for p in release.postings.all()) == D("4998")
    assert reconcile().ok


def test_market_buy_by_budget_returns_the_dust_one_step_cannot_buy(btc_usdt, trader, maker, btc, usdt):
    place(maker, side="sell", price="30000.01", qty="1")

    order = place(trader, side="buy", type="market", quote_qty="100")

    # 100 // (30000.01 * 0.0001) = 33 steps: 0.0033 BTC for 99.000033 USDT; 0.999967 comes back.
    assert (order.status, order.filled_qty, order.filled_quote_qty) == (OrderStatus.FILLED, D("0.0033"), D("99.000033"))
    assert balance(trader, usdt) == (D("100000") - D("99.000033"), D("0"))
    assert refreshed(order).held_remaining == 0
    assert reconcile().ok


def test_market_buy_by_quantity_holds_exactly_the_cost_of_its_fills(btc_usdt, trader, maker, usdt):
    place(maker, side="sell", price="50000", qty="0.1")
    place(maker, side="sell", price="50100", qty="0.1")

    order = place(trader, side="buy", type="market", qty="0.15")

    hold = JournalEntry.objects.get(idempotency_key=f"order:{order.id}:hold")
    assert max(p.amount for p in hold.postings.all()) == D("7505")  # 0.1 * 50,000 + 0.05 * 50,100
    assert not JournalEntry.objects.filter(idempotency_key=f"order:{order.id}:release").exists()
    assert (order.status, order.held_amount, order.held_remaining) == (OrderStatus.FILLED, D("7505"), D("0"))
    assert balance(trader, usdt) == (D("100000") - D("7505"), D("0"))
    assert reconcile().ok


def test_market_buy_by_quantity_the_user_cannot_pay_for_is_rejected(btc_usdt, maker, usdt):
    poor = UserFactory()
    fund(poor, usdt, "7504.99")
    place(maker, side="sell", price="50000", qty="0.1")
    place(maker, side="sell", price="50100", qty="0.1")
    before = book_state()

    with pytest.raises(InsufficientFunds):
        place(poor, side="buy", type="market", qty="0.15")

    assert book_state() == before
    assert balance(poor, usdt) == (D("7504.99"), D("0"))


def test_market_order_on_an_empty_book_expires_holding_nothing(btc_usdt, trader, btc, usdt):
    buy = place(trader, side="buy", type="market", qty="0.1")
    sell = place(trader, side="sell", type="market", qty="0.1")

    assert (buy.status, buy.reject_reason, buy.held_amount) == (OrderStatus.EXPIRED, EndReason.NO_LIQUIDITY, D("0"))
    assert (sell.status, sell.held_remaining) == (OrderStatus.EXPIRED, D("0"))
    assert balance(trader, btc) == (D("10"), D("0"))
    assert balance(trader, usdt) == (D("100000"), D("0"))
    assert reconcile().ok


def test_market_sell_walks_the_bids(btc_usdt, trader, maker, btc, usdt):
    place(maker, side="buy", price="49000", qty="0.1")
    place(maker, side="buy", price="48000", qty="0.1")

    order = place(trader, side="sell", type="market", qty="0.15")

    # 0.1 * 49,000 + 0.05 * 48,000 = 7,300 USDT, minus the taker fee 7.3.
    assert (order.status, order.filled_quote_qty, order.fee_total) == (OrderStatus.FILLED, D("7300"), D("7.3"))
    assert balance(trader, usdt) == (D("100000") + D("7292.7"), D("0"))
    assert balance(trader, btc) == (D("9.85"), D("0"))


def test_ioc_remainder_is_released(btc_usdt, trader, maker, usdt):
    place(maker, side="sell", price="50000", qty="0.1")

    order = place(trader, side="buy", price="50000", qty="0.3", time_in_force="IOC")

    assert (order.status, order.reject_reason) == (OrderStatus.EXPIRED, EndReason.UNFILLED_REMAINDER)
    assert (order.filled_qty, order.held_amount, order.held_remaining) == (D("0.1"), D("15000"), D("0"))
    assert balance(trader, usdt) == (D("95000"), D("0"))
    assert not Order.objects.filter(status__in=["open", "partially_filled"], user=trader).exists()


def test_fok_that_cannot_fill_fully_is_rejected_with_nothing_held_and_the_book_unchanged(
    btc_usdt, trader, maker, usdt, btc
):
    place(maker, side="sell", price="50000", qty="0.1")
    place(maker, side="sell", price="50010", qty="0.1")
    before = (book_state(), entry_keys(), balance(trader, usdt), balance(maker, btc))

    with pytest.raises(FokNotFillable) as raised:
        place(trader, side="buy", price="50010", qty="0.25", time_in_force="FOK")

    assert raised.value.fields.keys() == {"time_in_force"}
    assert (book_state(), entry_keys(), balance(trader, usdt), balance(maker, btc)) == before
    assert not Trade.objects.exists()


def test_fok_that_can_fill_fully_fills(btc_usdt, trader, maker):
    place(maker, side="sell", price="50000", qty="0.1")
    place(maker, side="sell", price="50010", qty="0.1")

    order = place(trader, side="buy", price="50010", qty="0.2", time_in_force="FOK")

    assert (order.status, order.filled_qty, order.filled_quote_qty) == (OrderStatus.FILLED, D("0.2"), D("10001"))
    assert Trade.objects.count() == 2


def test_post_only_that_would_take_is_rejected_and_one_that_would_not_rests(btc_usdt, trader, maker, usdt):
    place(maker, side="sell", price="50000", qty="0.1")

    with pytest.raises(PostOnlyWouldTake) as raised:
        place(trader, side="buy", price="50000", qty="0.1", post_only=True)
    assert raised.value.fields.keys() == {"post_only"}
    assert balance(trader, usdt) == (D("100000"), D("0"))

    resting = place(trader, side="buy", price="49999.99", qty="0.1", post_only=True)
    assert (resting.status, resting.held_remaining) == (OrderStatus.OPEN, D("4999.999"))
    assert not Trade.objects.exists()


def test_client_order_id_replay_returns_the_original_and_a_different_order_conflicts(btc_usdt, trader, usdt):
    first = place(trader, side="buy", price="50000", qty="0.1", client_order_id="abc-1")
    keys = entry_keys()

    again = place(trader, side="buy", price="50000", qty="0.1", client_order_id="abc-1")
    assert again.id == first.id
    assert entry_keys() == keys
    with pytest.raises(IdempotencyConflict) as raised:
        place(trader, side="buy", price="50001", qty="0.1", client_order_id="abc-1")
    assert raised.value.status == 409
    assert balance(trader, usdt) == (D("95000"), D("5000"))
    other = UserFactory()
    fund(other, usdt, "10000")
    assert place(other, side="buy", price="50000", qty="0.1", client_order_id="abc-1").id != first.id


# Price protection of market orders (Binance's PERCENT_PRICE_BY_SIDE idea) ----------------------------------


def _band(market, percent):
    return market_filters_update(
        market_id=market.id,
        min_qty=market.min_qty,
        max_qty=market.max_qty,
        min_notional=market.min_notional,
        market_order_price_band=percent,
    )


def test_a_market_buy_fills_no_further_than_the_price_band_and_releases_the_rest(btc_usdt, trader, usdt, btc):
    seller = UserFactory()
    fund(seller, btc, "1")
    place(seller, side="sell", price="60000", qty="0.1")
    place(seller, side="sell", price="60600", qty="0.1")  # 1 % above the best ask: inside a 1 % band
    place(seller, side="sell", price="60601", qty="0.1")  # beyond it
    _band(btc_usdt, "1")

    order = place(trader, side="buy", type="market", qty="0.3")

    assert (order.status, order.reject_reason) == (OrderStatus.EXPIRED, "price_protection")
    assert (order.filled_qty, order.filled_quote_qty) == (D("0.2"), D("12060"))
    assert balance(trader, usdt) == (D("100000") - D("12060"), D("0"))  # nothing left held
    assert Order.objects.filter(price=D("60601"), status=OrderStatus.OPEN).exists()


def test_a_market_sell_and_a_fill_or_kill_respect_the_band(btc_usdt, trader, usdt, btc):
    buyer = UserFactory()
    fund(buyer, usdt, "100000")
    place(buyer, side="buy", price="50000", qty="0.1")
    place(buyer, side="buy", price="47000", qty="0.1")  # 6 % below the best bid
    _band(btc_usdt, "5")

    with pytest.raises(FokNotFillable):
        place(trader, side="sell", type="market", qty="0.2", time_in_force="FOK")
    sold = place(trader, side="sell", type="market", qty="0.2")

    assert (sold.filled_qty, sold.reject_reason) == (D("0.1"), "price_protection")
    assert balance(trader, btc) == (D("9.9"), D("0"))


def test_without_a_band_a_market_order_sweeps_the_book(btc_usdt, trader, btc):
    seller = UserFactory()
    fund(seller, btc, "1")
    place(seller, side="sell", price="60000", qty="0.1")
    place(seller, side="sell", price="90000", qty="0.1")

    order = place(trader, side="buy", type="market", qty="0.2")

    assert (order.status, order.filled_qty) == (OrderStatus.FILLED, D("0.2"))


def test_the_band_is_a_percentage_from_0_01_to_100(btc_usdt):
    for bad in ("0", "100.01", "0.001", "abc"):
        with pytest.raises(DomainError) as raised:
            _band(btc_usdt, bad)
        assert "market_order_price_band" in raised.value.fields
    assert _band(btc_usdt, "2.5").market_order_price_band == D("2.5")
    assert _band(btc_usdt, None).market_order_price_band is None
