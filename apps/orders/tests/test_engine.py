"""The pure engine (apps.orders.engine): no database import, the models' vocabulary, settlement planning."""

import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from apps.orders import models
from apps.orders.engine import vocabulary
from apps.orders.engine.matching import Fill, Maker, MatchPlan, Stop
from apps.orders.engine.settlement import hold_plan, maker_updates, outcome, settlements_plan

D = Decimal


def test_the_engine_imports_no_django():
    code = (
        "import sys, apps.orders.engine.matching, apps.orders.engine.settlement, apps.orders.engine.vocabulary,"
        " apps.orders.engine.book, apps.orders.engine.batch;"
        "print(sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')))"
    )
    root = Path(__file__).resolve().parents[3]
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "engine_choices,model_choices",
    [
        (vocabulary.Side, models.Side),
        (vocabulary.OrderType, models.OrderType),
        (vocabulary.TimeInForce, models.TimeInForce),
        (vocabulary.SelfTradePrevention, models.SelfTradePrevention),
        (vocabulary.OrderStatus, models.OrderStatus),
        (vocabulary.EndReason, models.EndReason),
    ],
)
def test_the_engine_vocabulary_is_the_models_choices(engine_choices, model_choices):
    assert [member.value for member in engine_choices] == list(model_choices.values)
    assert set(vocabulary.OPEN_STATUSES) == set(models.OPEN_STATUSES)


def maker(id_, price, qty, *, side="sell", filled="0"):
    qty, filled = D(qty), D(filled)
    held = (qty - filled) * D(price) if side == "buy" else qty - filled
    return Maker(id_, 100 + id_, side, D(price), qty, filled, filled * D(price), D(0), held, D("0.001"))


def test_a_limit_buy_holds_its_value_and_keeps_its_price_improvement_for_the_release():
    m = maker(1, "99", "1")
    plan = MatchPlan(fills=[Fill(m, D("1"), D("99"), D("99"))], stop=Stop.BOOK)
    assert hold_plan(side="buy", price=D("100"), qty=D("2"), quote_qty=None, plan=plan) == (D("200"), D("101"))


def test_a_market_buy_by_quantity_holds_exactly_the_cost_of_its_fills():
    a, b = maker(1, "99", "1"), maker(2, "100", "1")
    plan = MatchPlan(fills=[Fill(a, D("1"), D("99"), D("99")), Fill(b, D("0.5"), D("100"), D("50"))])
    assert hold_plan(side="buy", price=None, qty=D("1.5"), quote_qty=None, plan=plan) == (D("149"), D("0"))


def test_fees_are_in_the_received_asset_rounded_up():
    m = maker(1, "33.33", "1")
    plan = MatchPlan(fills=[Fill(m, D("0.3"), D("33.33"), D("9.999"))])
    [s] = settlements_plan(taker_side="buy", taker_rate=D("0.001"), plan=plan, base_decimals=8, quote_decimals=2)
    assert (s.seq, s.taker_fee, s.maker_fee) == (1, D("0.0003"), D("0.01"))


@pytest.mark.parametrize(
    "type_,tif,stop,filled,expected",
    [
        ("limit", "GTC", Stop.BOOK, "0", ("open", "")),
        ("limit", "GTC", Stop.BOOK, "1", ("partially_filled", "")),
        ("limit", "IOC", Stop.BOOK, "1", ("expired", "unfilled_remainder")),
        ("market", "IOC", Stop.BOOK, "0", ("expired", "no_liquidity")),
        ("market", "IOC", Stop.PRICE_BAND, "1", ("expired", "price_protection")),
        ("market", "IOC", Stop.BUDGET, "1", ("filled", "")),
        ("limit", "GTC", Stop.SELF_TRADE, "0", ("expired", "self_trade_prevention")),
    ],
)
def test_the_takers_outcome(type_, tif, stop, filled, expected):
    fills = [Fill(maker(1, "1", filled), D(filled), D("1"), D(filled))] if filled != "0" else []
    assert outcome(type=type_, time_in_force=tif, plan=MatchPlan(fills=fills, stop=stop)) == expected


def test_a_maker_filled_completely_releases_what_its_price_left_and_an_expired_one_all_it_holds():
    full, part, expired = (
        maker(1, "100", "1", side="buy"),
        maker(2, "100", "2", side="buy"),
        maker(3, "99", "1", side="buy"),
    )
    full.held_remaining += D("5")  # held more than it spent (a hold at an older, higher price)
    plan = MatchPlan(fills=[Fill(full, D("1"), D("100"), D("100")), Fill(part, D("1"), D("100"), D("100"))])
    settlements = settlements_plan(taker_side="sell", taker_rate=D(0), plan=plan, base_decimals=8, quote_decimals=2)
    updates = maker_updates(taker_side="sell", settlements=settlements, expired=[expired])
    assert [(u.maker.id, u.status, u.reason, u.release) for u in updates] == [
        (1, "filled", "", D("5")),
        (2, "partially_filled", "", D("0")),
        (3, "expired", "self_trade_prevention", D("99")),
    ]
    assert (full.held_remaining, part.held_remaining, part.filled_qty) == (D(0), D("100"), D("1"))
