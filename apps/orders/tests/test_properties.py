"""Property-based: random order flow on markets of random (allowed) precisions keeps every invariant.

Each example starts from a small book (three bids, three asks) and runs random limit orders
(GTC, IOC, FOK, post-only), market orders by quantity and by quote budget, and cancels, by
three users (one of them short of funds) with random self-trade prevention modes.

After every step: reconcile passes (ledger invariants 1-4, 6, 7 and the orders' invariant 8),
every ended order holds nothing, every open order holds what it still needs, and per asset the
sum of all user balances plus fee revenue never changes. A refused step changes nothing.
"""

from decimal import Decimal

from django.db import transaction
from django.db.models import Sum
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from apps.core.errors import DomainError
from apps.ledger.models import Account, AccountKind, JournalEntry
from apps.ledger.reconciliation import reconcile
from apps.ledger.tests.factories import AssetFactory, UserFactory, fund
from apps.orders.models import ENDED_STATUSES, OPEN_STATUSES, Order, Side
from apps.orders.services import market_create, order_cancel, order_place

USERS = 3
D = Decimal


@st.composite
def precisions(draw):
    """Asset precisions and a tick and step the market rule allows (tick decimals + step decimals <= quote's)."""
    base_decimals = draw(st.sampled_from([0, 2, 8, 18]))
    quote_decimals = draw(st.sampled_from([2, 6, 8]))
    step_decimals = draw(st.integers(0, min(base_decimals, quote_decimals)))
    tick_decimals = draw(st.integers(0, quote_decimals - step_decimals))
    step = D(draw(st.sampled_from([1, 2, 5]))).scaleb(-step_decimals)
    tick = D(draw(st.sampled_from([1, 5, 25]))).scaleb(-tick_decimals)
    return base_decimals, quote_decimals, tick, step


stp_modes = st.sampled_from(["expire_taker", "expire_maker", "expire_both"])
users = st.integers(0, USERS - 1)
sides = st.sampled_from(["buy", "sell"])
# Price offsets in ticks, positive = aggressive (shrinks towards a crossing order).
offsets = st.sampled_from([1, 0, 2, -1, 3, -2])
limit_orders = st.tuples(
    st.just("limit"),
    users,
    sides,
    offsets,
    st.integers(1, 60),
    st.sampled_from(["GTC", "GTC", "GTC", "IOC", "FOK"]),
    st.booleans(),
    stp_modes,
)
operations = st.lists(
    st.one_of(
        limit_orders,
        limit_orders,
        limit_orders,
        st.tuples(st.just("market_qty"), users, sides, st.integers(1, 60), stp_modes),
        st.tuples(st.just("market_quote"), users, st.integers(1, 60), st.integers(0, 99), stp_modes),
        st.tuples(st.just("cancel"), st.integers(0, 50)),
    ),
    min_size=3,
    max_size=20,
)


def user_and_fee_totals() -> dict[int, Decimal]:
    kinds = [AccountKind.USER_AVAILABLE, AccountKind.USER_HELD, AccountKind.FEE_REVENUE]
    rows = Account.objects.filter(kind__in=kinds).values("asset_id").annotate(total=Sum("balance"))
    return {row["asset_id"]: row["total"] for row in rows}


def snapshot():
    return (
        JournalEntry.objects.count(),
        list(Order.objects.order_by("id").values_list("id", "status", "held_remaining")),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(market_precision=precisions(), operations=operations, min_notional_steps=st.sampled_from([0, 0, 3]))
def test_random_order_flow_keeps_every_invariant(db, default_fees, market_precision, operations, min_notional_steps):
    base_decimals, quote_decimals, tick, step = market_precision
    with transaction.atomic():  # a savepoint per example, rolled back at the end
        base = AssetFactory(code="BASE", decimals=base_decimals)
        quote = AssetFactory(code="QUOTE", decimals=quote_decimals)
        reference = tick * 100  # prices move around 100 ticks
        market = market_create(
            base=base,
            quote=quote,
            tick_size=tick,
            step_size=step,
            min_qty=step,
            max_qty=step * 1000,
            min_notional=(reference * step * min_notional_steps).quantize(quote.quantum),
        )
        traders = [UserFactory() for _ in range(USERS)]
        for n, trader in enumerate(traders):  # the first one is short of funds now and then
            fund(trader, base, step * (20 + 200 * n))
            fund(trader, quote, reference * step * (20 + 150 * n))
        funded = user_and_fee_totals()
        for level in (1, 2, 3):  # a book to trade against: bids below the reference, asks above
            order_place(
                user_id=traders[1].id,
                market=market.symbol,
                side=Side.BUY,
                price=reference - tick * level,
                qty=step * 5 * level,
            )
            order_place(
                user_id=traders[2].id,
                market=market.symbol,
                side=Side.SELL,
                price=reference + tick * level,
                qty=step * 5 * level,
            )

        for step_number, operation in enumerate(operations):
            kind, args = operation[0], operation[1:]
            if kind != "cancel":  # users take turns (plus the drawn offset): fewer self-trades
                args = ((args[0] + step_number) % USERS, *args[1:])
            before = snapshot()
            try:
                if kind == "limit":
                    user, side, ticks, steps, tif, post_only, stp = args
                    # A positive offset makes an order aggressive (a bid above, an ask below the reference).
                    price = reference + tick * (ticks if side == Side.BUY else -ticks)
                    order_place(
                        user_id=traders[user].id,
                        market=market.symbol,
                        side=side,
                        price=price,
                        qty=step * steps,
                        time_in_force=tif,
                        post_only=post_only and tif == "GTC" and ticks % 2 == 0,
                        stp=stp,
                    )
                elif kind == "market_qty":
                    user, side, steps, stp = args
                    order_place(
                        user_id=traders[user].id,
                        market=market.symbol,
                        side=side,
                        type="market",
                        qty=step * steps,
                        stp=stp,
                    )
                elif kind == "market_quote":
                    user, steps, dust, stp = args
                    budget = reference * step * steps + quote.quantum * dust
                    order_place(
                        user_id=traders[user].id,
                        market=market.symbol,
                        side=Side.BUY,
                        type="market",
                        quote_qty=budget,
                        stp=stp,
                    )
                else:
                    open_ids = list(
                        Order.objects.filter(status__in=OPEN_STATUSES).order_by("id").values_list("id", flat=True)
                    )
                    if open_ids:
                        order_cancel(order_id=open_ids[args[0] % len(open_ids)])
            except DomainError as refusal:
                event(f"{kind} refused: {refusal.code}")
                assert snapshot() == before  # a refusal changes nothing

            report = reconcile()
            assert report.ok, report.as_dict()
            assert not Order.objects.filter(status__in=ENDED_STATUSES).exclude(held_remaining=0).exists()
            for order in Order.objects.filter(status__in=OPEN_STATUSES):
                needed = order.remaining_qty * (order.price if order.side == Side.BUY else 1)
                assert order.held_remaining >= needed  # what it still needs, plus any price improvement
            assert user_and_fee_totals() == funded

        from apps.orders.models import Trade

        trades = Trade.objects.count()
        event(f"trades: {min(trades, 5)}{'+' if trades >= 5 else ''}")
        for status in Order.objects.values_list("status", flat=True).distinct():
            event(f"an order ended {status}")
        transaction.set_rollback(True)
