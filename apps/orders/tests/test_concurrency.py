"""Placements and cancels from real threads against the real PostgreSQL, each with its own connection."""

import random
import time
from collections import Counter
from decimal import Decimal

import pytest

from apps.core.errors import DomainError, InvalidState
from apps.ledger.models import Account, AccountKind, JournalEntry
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import user_accounts
from apps.ledger.tests.factories import AssetFactory, UserFactory, fund
from apps.ledger.tests.threads import run_concurrently
from apps.orders.models import OPEN_STATUSES, Order, OrderStatus, Trade
from apps.orders.services import market_create, order_cancel
from apps.orders.tests.helpers import place, refreshed

pytestmark = pytest.mark.django_db(transaction=True)
D = Decimal


def totals(*assets) -> dict[str, Decimal]:
    """Per asset: every user balance (available and held) plus fee revenue."""
    result = {}
    for asset in assets:
        accounts = Account.objects.filter(
            asset=asset, kind__in=[AccountKind.USER_AVAILABLE, AccountKind.USER_HELD, AccountKind.FEE_REVENUE]
        )
        result[asset.code] = sum((a.balance for a in accounts), D(0))
    return result


def released(order_id: int) -> Decimal:
    entry = JournalEntry.objects.filter(idempotency_key=f"order:{order_id}:release").first()
    return max(p.amount for p in entry.postings.all()) if entry else D(0)


def test_a_cancel_racing_a_fill_either_fills_then_releases_the_rest_or_releases_it_all(btc_usdt, btc, usdt):
    buyer, seller = UserFactory(), UserFactory()
    fund(buyer, usdt, "1000000")
    fund(seller, btc, "100")
    outcomes = Counter()

    for round_ in range(30):
        bid = place(buyer, side="buy", price="50000", qty="0.2")
        sell_qty = "0.1" if round_ % 2 else "0.2"
        jitter = random.Random(round_)  # a head start of up to a millisecond, either way
        cancel_result, sell = run_concurrently(
            [
                lambda jitter=jitter, bid=bid: (
                    time.sleep(jitter.uniform(0, 0.001)),
                    order_cancel(order_id=bid.id, user_id=buyer.id),
                )[1],
                lambda jitter=jitter, sell_qty=sell_qty: (
                    time.sleep(jitter.uniform(0, 0.001)),
                    place(seller, side="sell", price="50000", qty=sell_qty),
                )[1],
            ]
        )

        assert not isinstance(sell, Exception), sell
        bid = refreshed(bid)
        consumed = sum((t.quote_qty for t in Trade.objects.filter(maker_order_id=bid.id)), D(0))
        release = released(bid.id)
        assert bid.held_remaining == 0
        assert consumed + release == bid.held_amount == D("10000")  # never both a full release and a fill
        if isinstance(cancel_result, InvalidState):  # filled completely first: nothing left to release
            outcomes["filled"] += 1
            assert (bid.status, consumed, release) == (OrderStatus.FILLED, D("10000"), D("0"))
        else:
            assert not isinstance(cancel_result, Exception), cancel_result
            assert bid.status == OrderStatus.CANCELLED
            outcomes["released all" if consumed == 0 else "filled then released the rest"] += 1
            assert release in (D("10000"), D("5000"))
        if sell.status in OPEN_STATUSES:
            order_cancel(order_id=sell.id)

    assert outcomes["released all"], outcomes  # the race was really run both ways
    assert outcomes["filled"] + outcomes["filled then released the rest"], outcomes
    assert not Order.objects.filter(status__in=OPEN_STATUSES).exists()
    report = reconcile()
    assert report.ok, report.as_dict()


def test_many_threads_trading_one_market_keep_every_invariant(btc_usdt, btc, usdt):
    users = [UserFactory() for _ in range(6)]
    for user in users:
        fund(user, usdt, "100000")
        fund(user, btc, "2")
    before = totals(btc, usdt)

    def trader(seed: int):
        rng = random.Random(seed)
        placed: list[int] = []
        for _ in range(12):
            user = rng.choice(users)
            try:
                if placed and rng.random() < 0.2:
                    order_cancel(order_id=placed.pop(rng.randrange(len(placed))), user_id=None)
                    continue
                side = rng.choice(["buy", "sell"])
                price = str(D(50000) + rng.randrange(-20, 21) * 5)
                order = place(user, side=side, price=price, qty=str(D(rng.randrange(1, 50)) / 1000))
                if order.status in OPEN_STATUSES:
                    placed.append(order.id)
            except (InvalidState, DomainError):
                pass  # an order already filled by another thread; insufficient funds
        return "done"

    results = run_concurrently([lambda s=s: trader(s) for s in range(6)])

    assert results == ["done"] * 6, results
    assert Trade.objects.exists()
    assert totals(btc, usdt) == before
    report = reconcile()
    assert report.ok, report.as_dict()


def test_two_markets_sharing_users_in_opposite_roles_never_deadlock(btc_usdt, btc, usdt, caplog):
    """Alice sells BTC to Bob while Bob sells ETH to Alice: each placement holds its buyer's USDT and
    credits its seller's. Locking entry by entry, crossing pairs deadlocked (about 20 times in this test,
    a second each); a placement locks all its accounts at once, in id order, so none does."""
    eth = AssetFactory(code="ETH", decimals=18)
    market_create(
        base=eth,
        quote=usdt,
        tick_size=D("0.01"),
        step_size=D("0.0001"),
        min_qty=D("0.0001"),
        max_qty=D("1000"),
        min_notional=D("1"),
    )
    alice, bob = UserFactory(), UserFactory()
    for user in (alice, bob):
        fund(user, usdt, "1000000")
        fund(user, btc, "10")
        fund(user, eth, "100")
        for asset in (usdt, btc, eth):
            user_accounts(user.id, asset)  # created up front: only the placements' locking is under test
    before = totals(btc, eth, usdt)

    def trader(market: str, price: str, seller, buyer):
        for _ in range(15):  # each buy finds a resting sell: its own thread's, if no other is left
            place(seller, market=market, side="sell", price=price, qty="0.01")
            place(buyer, market=market, side="buy", price=price, qty="0.01")
        return "done"

    caplog.set_level("INFO", logger="apps.ledger.transactions")
    results = run_concurrently(
        [
            (lambda: trader("BTC-USDT", "50000", alice, bob))
            if n % 2
            else (lambda: trader("ETH-USDT", "3000", bob, alice))
            for n in range(6)
        ]
    )

    assert results == ["done"] * 6, results
    assert Trade.objects.count() == 90
    assert totals(btc, eth, usdt) == before
    assert reconcile().ok
    assert [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()] == []
