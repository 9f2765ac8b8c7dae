"""Fees: rounded up to the received asset's precision, from each side's proceeds, rates recorded per trade."""

from decimal import Decimal

import pytest

from apps.ledger.models import Account, AccountKind
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import system_account
from apps.ledger.tests.factories import AssetFactory, UserFactory, fund
from apps.ledger.trading import market_fee_shard_key
from apps.orders.engine.matching import fee_for
from apps.orders.models import FeeSchedule, Trade
from apps.orders.selectors import fee_rates_for_user
from apps.orders.services import fee_tier_assign, market_create
from apps.orders.tests.helpers import balance, place

D = Decimal


def fee_revenue(asset) -> Decimal:
    return sum((a.balance for a in Account.objects.filter(kind=AccountKind.FEE_REVENUE, asset=asset)), Decimal(0))


@pytest.mark.parametrize(
    ("amount", "rate", "decimals", "fee"),
    [
        (D("5"), D("0.001"), 6, D("0.005")),
        (D("5"), D("0.001"), 2, D("0.01")),  # 0.005 rounds up, never down to 0.00
        (D("0.000001"), D("0.001"), 6, D("0.000001")),
        (D("11980"), D("0.001"), 6, D("11.98")),
        (D("0.0001"), D("0.001"), 8, D("0.0000001")),
        (D("0.00012345"), D("0.001"), 8, D("0.00000013")),
        (D("1"), D("0"), 8, D("0")),
        # 123455999999999999.99999999999999999999876544: 38 digits in, no precision lost, rounded up.
        (D("99999999999999999999.999999999999999999"), D("0.00123456"), 18, D("123456000000000000")),
        (D("12345678901234567890.123456789012345678"), D("0.001"), 18, D("12345678901234567.890123456789012346")),
    ],
)
def test_fee_is_rounded_up_to_the_asset_precision(amount, rate, decimals, fee):
    assert fee_for(amount, rate, decimals) == fee


def sweep_hundred_fills(market, price: str, qty: str, base, quote) -> tuple[list, object]:
    makers = [UserFactory() for _ in range(100)]
    for user in makers:
        fund(user, base, qty)
        place(user, market=market, side="sell", price=price, qty=qty)
    taker = UserFactory()
    fund(taker, quote, "1000")
    order = place(taker, market=market, side="buy", price=price, qty=str(D(qty) * 100))
    return makers, order


def test_hundred_fills_of_5_usdt_at_0_1_percent_never_round_a_fee_to_zero(btc_usdt, btc, usdt):
    makers, order = sweep_hundred_fills("BTC-USDT", "50000", "0.0001", btc, usdt)

    trades = list(Trade.objects.filter(taker_order_id=order.id))
    assert len(trades) == 100
    assert {t.quote_qty for t in trades} == {D("5")}
    assert {t.maker_fee for t in trades} == {D("0.005")}
    assert {t.taker_fee for t in trades} == {D("0.0000001")}
    assert fee_revenue(usdt) == D("0.5")
    assert fee_revenue(btc) == D("0.00001")
    assert all(balance(m, usdt) == (D("4.995"), D("0")) for m in makers)
    assert reconcile().ok


def test_hundred_fills_of_5_in_a_two_decimal_quote_round_each_fee_up_to_one_cent(db, btc, default_fees):
    cents = AssetFactory(code="CENT", decimals=2)
    market_create(
        base=btc,
        quote=cents,
        tick_size=D("1"),
        step_size=D("0.01"),
        min_qty=D("0.01"),
        max_qty=D("100"),
        min_notional=D("1"),
    )

    makers, order = sweep_hundred_fills("BTC-CENT", "500", "0.01", btc, cents)

    trades = list(Trade.objects.filter(taker_order_id=order.id))
    assert len(trades) == 100
    assert {t.maker_fee for t in trades} == {D("0.01")}  # 5 * 0.1 % = 0.005, rounded up
    assert fee_revenue(cents) == D("1")
    assert all(balance(m, cents) == (D("4.99"), D("0")) for m in makers)
    assert reconcile().ok


def test_a_fee_that_takes_a_whole_one_unit_fill_leaves_out_the_zero_leg(db, default_fees):
    lot = AssetFactory(code="LOT", decimals=2)
    cents = AssetFactory(code="CENT", decimals=2)
    market_create(
        base=lot,
        quote=cents,
        tick_size=D("1"),
        step_size=D("0.01"),
        min_qty=D("0.01"),
        max_qty=D("100"),
        min_notional=D("0"),
    )
    seller, buyer = UserFactory(), UserFactory()
    fund(seller, lot, "1")
    fund(buyer, cents, "100")
    place(seller, market="LOT-CENT", side="sell", price="50", qty="0.01")

    order = place(buyer, market="LOT-CENT", side="buy", price="50", qty="0.01")

    assert (order.filled_qty, order.fee_total) == (D("0.01"), D("0.01"))
    assert balance(buyer, lot) == (D("0"), D("0"))
    assert fee_revenue(lot) == D("0.01")
    assert reconcile().ok


def test_tier_rates_are_used_and_recorded_on_the_trade(btc_usdt, btc, usdt):
    vip = FeeSchedule.objects.create(name="vip", maker_rate=D("0"), taker_rate=D("0.0005"))
    maker, taker = UserFactory(), UserFactory()
    fee_tier_assign(user_id=maker.id, schedule_id=vip.id)
    fund(maker, btc, "1")
    fund(taker, usdt, "100000")
    place(maker, side="sell", price="50000", qty="0.1")

    place(taker, side="buy", price="50000", qty="0.1")

    trade = Trade.objects.get()
    assert (trade.maker_fee_rate, trade.taker_fee_rate) == (D("0"), D("0.001"))
    assert (trade.maker_fee, trade.taker_fee) == (D("0"), D("0.0001"))
    assert balance(maker, usdt) == (D("5000"), D("0"))
    assert fee_rates_for_user(user_id=maker.id) == (D("0"), D("0.0005"))

    fee_tier_assign(user_id=maker.id, schedule_id=None)
    assert fee_rates_for_user(user_id=maker.id) == (D("0.001"), D("0.001"))


def test_a_markets_fees_go_to_the_one_fee_revenue_shard_per_asset_the_ledger_names_for_the_market(btc_usdt, btc, usdt):
    """Keyed by trade, a batch of fills locked most of the quote asset's shards, which every market shares."""
    makers, order = sweep_hundred_fills("BTC-USDT", "50000", "0.0001", btc, usdt)

    shards = {
        system_account(AccountKind.FEE_REVENUE, asset, shard_key=market_fee_shard_key(btc_usdt.id)).id
        for asset in (btc, usdt)
    }
    credited = {
        posting.account_id
        for trade in Trade.objects.filter(taker_order_id=order.id)
        for posting in trade.entry.postings.all()
        if posting.account.kind == AccountKind.FEE_REVENUE
    }
    assert credited == shards
    assert Trade.objects.filter(taker_order_id=order.id).count() == 100
    assert Account.objects.filter(kind=AccountKind.FEE_REVENUE).exclude(id__in=shards).exclude(balance=0).count() == 0
    assert len({p.account_id for p in Trade.objects.first().entry.postings.all()}) == 6
