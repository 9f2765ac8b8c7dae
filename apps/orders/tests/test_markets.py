"""Markets: the precision rule (service, model validation and the database), fixed shape, halt and resume."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, ProgrammingError, connection, transaction

from apps.core.errors import DomainError, NotFound
from apps.ledger.tests.factories import AssetFactory, UserFactory
from apps.orders.models import Market, MarketStatus, decimals_of, market_precision_problems
from apps.orders.services import market_create, market_filters_update, market_halt, market_resume

D = Decimal


def test_decimals_of():
    assert [decimals_of(D(v)) for v in ("0.01", "0.010", "1", "10", "1E+1", "0.00000001")] == [2, 2, 0, 0, 0, 8]


@pytest.mark.parametrize(
    ("tick", "step", "problem"),
    [
        ("0.01", "0.0001", None),  # 2 + 4 = 6: USDT's precision
        ("0.001", "0.0001", "tick_size"),  # 3 + 4 = 7 > 6
        ("0.01", "0.00001", "tick_size"),  # 2 + 5 = 7 > 6
        ("1", "0.000001", None),
        ("0.000001", "1", None),
        ("1", "0.000000001", "step_size"),  # 9 > BTC's 8 (and > USDT's 6)
    ],
)
def test_precision_rule(btc, usdt, tick, step, problem):
    problems = market_precision_problems(base=btc, quote=usdt, tick_size=D(tick), step_size=D(step))
    assert (next(iter(problems)) if problems else None) == problem


def market_kwargs(btc, usdt, **overrides):
    return {
        "base": btc,
        "quote": usdt,
        "tick_size": D("0.01"),
        "step_size": D("0.0001"),
        "min_qty": D("0.0001"),
        "max_qty": D("100"),
        "min_notional": D("1"),
        **overrides,
    }


def test_the_service_refuses_a_market_that_could_produce_an_inexact_fill(btc, usdt):
    with pytest.raises(DomainError) as raised:
        market_create(**market_kwargs(btc, usdt, tick_size=D("0.001")))
    assert "tick_size" in raised.value.fields
    assert not Market.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"min_qty": D("0.00015")}, "min_qty"),
        ({"max_qty": D("0.00005"), "min_qty": D("0.0001")}, "max_qty"),
        ({"min_notional": D("0.0000001")}, "min_notional"),
        ({"tick_size": D("0")}, "tick_size"),
        ({"step_size": D("-0.01")}, "step_size"),
    ],
)
def test_the_service_refuses_bad_filters(btc, usdt, overrides, field):
    with pytest.raises(DomainError) as raised:
        market_create(**market_kwargs(btc, usdt, **overrides))
    assert field in raised.value.fields


def test_model_validation_refuses_the_same_market(btc, usdt):
    market = Market(symbol="BTC-USDT", **market_kwargs(btc, usdt, tick_size=D("0.001")))
    with pytest.raises(ValidationError) as raised:
        market.full_clean()
    assert "tick_size" in raised.value.message_dict


def test_the_database_refuses_the_same_market_written_directly(btc, usdt):
    with pytest.raises(IntegrityError, match="precision rule"), transaction.atomic():
        Market.objects.create(symbol="BTC-USDT", **market_kwargs(btc, usdt, step_size=D("0.00001"), min_qty=D("0.001")))


def test_the_database_refuses_a_min_notional_finer_than_the_quote(btc, usdt):
    market = market_create(**market_kwargs(btc, usdt))
    with pytest.raises(IntegrityError, match="precision rule"), transaction.atomic():
        Market.objects.filter(id=market.id).update(min_notional=D("1.0000001"))


def test_the_database_refuses_qty_limits_off_the_step(btc, usdt):
    with pytest.raises(IntegrityError, match="market_qty_limits_multiple_of_step"), transaction.atomic():
        Market.objects.create(symbol="BTC-USDT", **market_kwargs(btc, usdt, min_qty=D("0.00015")))


def test_the_service_refuses_a_symbol_that_does_not_name_the_markets_assets(btc, usdt):
    with pytest.raises(DomainError) as raised:
        market_create(symbol="USDT-BTC", **market_kwargs(btc, usdt))
    assert raised.value.fields == {"symbol": "Must be BTC-USDT: the base asset's code, a dash, the quote asset's code."}
    assert not Market.objects.exists()


def test_the_service_lists_one_market_per_pair_and_no_two_alike_without_their_dash(btc, usdt):
    market_create(**market_kwargs(btc, usdt))
    with pytest.raises(DomainError) as same_pair:
        market_create(**market_kwargs(btc, usdt))
    btcu, sdt = AssetFactory(code="BTCU", decimals=8), AssetFactory(code="SDT", decimals=6)
    with pytest.raises(DomainError) as same_binance_symbol:
        market_create(**market_kwargs(btcu, sdt))

    assert same_pair.value.fields == {"quote": "BTC-USDT already trades BTC against USDT."}
    assert same_binance_symbol.value.fields == {
        "base": "BTC-USDT already reads BTCUSDT without its dash (its symbol in the Binance API)."
    }
    assert list(Market.objects.values_list("symbol", flat=True)) == ["BTC-USDT"]


def test_the_database_refuses_a_second_market_of_a_pair_and_a_symbol_alike_without_its_dash(btc, usdt):
    market_create(**market_kwargs(btc, usdt))
    btcu, sdt = AssetFactory(code="BTCU", decimals=8), AssetFactory(code="SDT", decimals=6)
    with pytest.raises(IntegrityError, match="market_one_per_pair"), transaction.atomic():
        Market.objects.create(symbol="XBT-USDT", **market_kwargs(btc, usdt))
    with pytest.raises(IntegrityError, match="market_symbol_unique_without_dash"), transaction.atomic():
        Market.objects.create(symbol="BTCU-SDT", **market_kwargs(btcu, sdt))


def test_tick_step_and_assets_never_change_once_created(btc, usdt):
    market = market_create(**market_kwargs(btc, usdt))
    eth = AssetFactory(code="ETH", decimals=18)
    for column, value in (
        ("tick_size", D("0.1")),
        ("step_size", D("0.001")),
        ("base_id", eth.id),
        ("symbol", "ETH-USDT"),
    ):
        with pytest.raises(ProgrammingError, match="Cannot update"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(f"UPDATE orders_market SET {column} = %s WHERE id = %s", [value, market.id])
    assert Market.objects.get().tick_size == D("0.01")


def test_filters_can_change(btc, usdt):
    market = market_create(**market_kwargs(btc, usdt))
    market_filters_update(market_id=market.id, min_qty=D("0.001"), max_qty=D("10"), min_notional=D("5"))
    market.refresh_from_db()
    assert (market.min_qty, market.max_qty, market.min_notional) == (D("0.001"), D("10"), D("5"))
    with pytest.raises(DomainError) as raised:
        market_filters_update(market_id=market.id, min_qty=D("0.00015"), max_qty=D("10"), min_notional=D("5"))
    assert "min_qty" in raised.value.fields


def test_halt_and_resume_are_idempotent_and_bump_the_sequence(btc, usdt):
    market = market_create(**market_kwargs(btc, usdt))
    operator = UserFactory()
    assert market_halt(market_id=market.id, operator_id=operator.id, reason="incident").status == MarketStatus.HALTED
    assert market_halt(market_id=market.id, operator_id=operator.id, reason="incident").sequence == 1
    assert market_resume(market_id=market.id, operator_id=operator.id, reason="fixed").status == MarketStatus.ACTIVE
    with pytest.raises(NotFound):
        market_halt(market_id=market.id + 1, operator_id=operator.id, reason="incident")


def test_halt_and_resume_are_audited_with_their_reason_in_the_same_transaction(btc, usdt):
    from apps.audit.models import AuditLogEntry

    market = market_create(**market_kwargs(btc, usdt))
    operator = UserFactory()
    market_halt(market_id=market.id, operator_id=operator.id, reason="  feed outage  ")
    market_resume(market_id=market.id, operator_id=operator.id, reason="feed back")
    log = list(AuditLogEntry.objects.order_by("id").values_list("actor_id", "action", "before", "after"))
    assert [(actor, action) for actor, action, *_ in log] == [
        (operator.id, "market.halt"),
        (operator.id, "market.resume"),
    ]
    assert (log[0][2]["status"], log[0][3]["status"], log[0][3]["reason"]) == ("active", "halted", "feed outage")
    assert (log[1][2]["status"], log[1][3]["status"], log[1][3]["reason"]) == ("halted", "active", "feed back")


def test_a_halt_without_a_reason_changes_nothing(btc, usdt):
    from apps.audit.models import AuditLogEntry

    market = market_create(**market_kwargs(btc, usdt))
    with pytest.raises(DomainError) as raised:
        market_halt(market_id=market.id, operator_id=UserFactory().id, reason="  ")
    assert "reason" in raised.value.fields
    market.refresh_from_db()
    assert market.status == MarketStatus.ACTIVE and not AuditLogEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_halt_whose_audit_row_fails_is_rolled_back(btc, usdt):
    """The halt and its audit row are one transaction: an actor that does not exist leaves the market active."""
    market = market_create(**market_kwargs(btc, usdt))
    with pytest.raises(IntegrityError):
        market_halt(market_id=market.id, operator_id=10**9, reason="incident")
    market.refresh_from_db()
    assert market.status == MarketStatus.ACTIVE
