"""The placement's own SQL path: prepared statements, pipelining, the per-process market shapes."""

from dataclasses import replace
from decimal import Decimal

import pytest

from apps.ledger.errors import IdempotencyConflict
from apps.ledger.models import JournalEntry
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.models import Order, OrderStatus, Trade
from apps.orders.services import placement
from apps.orders.tests.helpers import balance, place

D = Decimal


@pytest.fixture
def traders(btc_usdt, btc, usdt):
    buyer, seller = UserFactory(), UserFactory()
    fund(buyer, usdt, "100000")
    fund(seller, btc, "10")
    return buyer, seller


def test_a_stale_market_shape_is_noticed_and_the_order_judged_on_the_locked_market(traders, btc_usdt, monkeypatch):
    buyer, seller = traders
    place(seller, side="sell", price="50000", qty="0.1")
    shape = placement.SHAPES["BTC-USDT"]
    # As if the symbol had named another market, with a coarser tick, when this process last saw it.
    monkeypatch.setitem(placement.SHAPES, "BTC-USDT", replace(shape, id=shape.id + 100, tick_size=D("1")))

    order = place(buyer, side="buy", price="50000.01", qty="0.1")  # off the stale tick, on the real one

    assert (order.status, order.filled_qty) == (OrderStatus.FILLED, D("0.1"))
    assert placement.SHAPES["BTC-USDT"] == shape


def test_a_stale_shape_naming_another_market_does_not_match_that_markets_book(
    traders, btc_usdt, btc, usdt, monkeypatch
):
    from apps.ledger.tests.factories import AssetFactory
    from apps.orders.services import market_create

    buyer, seller = traders
    other = market_create(
        base=btc,
        quote=AssetFactory(code="USDX", decimals=6),
        tick_size=D("0.01"),
        step_size=D("0.0001"),
        min_qty=D("0.0001"),
        max_qty=D("1000"),
        min_notional=D("1"),
    )
    place(seller, market="BTC-USDX", side="sell", price="50000", qty="0.1")  # only on the other market
    place(buyer, side="buy", price="1", qty="1")
    monkeypatch.setitem(placement.SHAPES, "BTC-USDT", replace(placement.SHAPES["BTC-USDT"], id=other.id))

    order = place(buyer, side="buy", price="50000", qty="0.1")

    assert (order.market_id, order.status) == (btc_usdt.id, OrderStatus.OPEN)
    assert not Trade.objects.exists()


def test_without_prepared_statements_placement_works_the_same(traders, settings, btc, usdt):
    settings.DATABASE_PREPARED_STATEMENTS = False
    buyer, seller = traders
    place(seller, side="sell", price="50000", qty="0.1")
    order = place(buyer, side="buy", price="50010", qty="0.1")
    assert (order.status, order.filled_quote_qty) == (OrderStatus.FILLED, D("5000"))
    assert balance(buyer, usdt) == (D("95000"), D("0"))


def test_a_client_order_id_taken_between_the_check_and_the_insert_is_a_conflict(traders, usdt, monkeypatch):
    buyer, _ = traders
    first = place(buyer, side="buy", price="40000", qty="0.1", client_order_id="dup")
    monkeypatch.setattr(placement, "_find_replay", lambda request, market: None)  # as if placed concurrently
    keys = set(JournalEntry.objects.values_list("idempotency_key", flat=True))

    with pytest.raises(IdempotencyConflict) as raised:
        place(buyer, side="buy", price="40001", qty="0.1", client_order_id="dup")

    assert raised.value.fields.keys() == {"client_order_id"}
    assert list(Order.objects.values_list("id", flat=True)) == [first.id]
    assert set(JournalEntry.objects.values_list("idempotency_key", flat=True)) == keys
    assert balance(buyer, usdt) == (D("96000"), D("4000"))


def test_order_ids_follow_the_order_in_which_placements_hold_the_market_lock(traders):
    buyer, seller = traders
    ids = [place(seller, side="sell", price="50000", qty="0.01").id for _ in range(5)]
    assert ids == sorted(ids)
    taker = place(buyer, side="buy", price="50000", qty="0.05")
    assert list(Trade.objects.filter(taker_order=taker).order_by("seq").values_list("maker_order_id", flat=True)) == ids


def test_a_placement_posts_its_hold_fills_and_releases_in_one_batched_call(traders, monkeypatch):
    buyer, seller = traders
    makers = [place(seller, side="sell", price=price, qty="0.01") for price in ("49000", "49500", "50000")]
    calls = []
    real = placement.entries_post

    def counting(entries):
        calls.append([entry.idempotency_key for entry in entries])
        return real(entries)

    monkeypatch.setattr(placement, "entries_post", counting)
    taker = place(buyer, side="buy", price="50000", qty="0.03", time_in_force="IOC")

    trades = [f"trade:{taker.id}-{n}" for n in (1, 2, 3)]
    assert calls == [[f"order:{taker.id}:hold", *trades, f"order:{taker.id}:release"]]
    assert taker.status == OrderStatus.FILLED
    assert sorted(Trade.objects.filter(taker_order=taker).values_list("entry__idempotency_key", flat=True)) == trades
    assert all(Order.objects.get(id=m.id).status == OrderStatus.FILLED for m in makers)
