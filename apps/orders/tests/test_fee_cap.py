"""FEE_RATE_MAX caps every fee rate the orders services set or put in force (hole 5)."""

from decimal import Decimal

import pytest

from apps.ledger.tests.factories import UserFactory
from apps.orders.errors import InvalidFeeRate
from apps.orders.models import FeeSchedule, UserFeeTier
from apps.orders.services import (
    fee_rate_parse,
    fee_schedule_create,
    fee_schedule_make_default,
    fee_schedule_rates_update,
    fee_tier_assign,
)

D = Decimal


@pytest.mark.parametrize(
    ("raw", "rate"), [("0", D("0")), ("0.001", D("0.001")), ("0.01", D("0.01")), (D("0.00000001"), D("1E-8"))]
)
def test_rates_from_zero_to_the_cap_are_accepted_exactly(raw, rate):
    assert fee_rate_parse(raw, field="taker_rate") == rate


def test_the_cap_follows_the_setting(settings):
    settings.FEE_RATE_MAX = D("0.002")
    with pytest.raises(InvalidFeeRate) as raised:
        fee_rate_parse("0.0025", field="maker_rate")
    assert raised.value.fields == {"maker_rate": "At most 0.002 (0.2 %), the limit set by FEE_RATE_MAX."}


def test_a_schedule_above_the_cap_is_neither_created_updated_made_default_nor_assigned(default_fees):
    with pytest.raises(InvalidFeeRate):
        fee_schedule_create(name="greedy", maker_rate="0", taker_rate="0.99999999")
    with pytest.raises(InvalidFeeRate):
        fee_schedule_rates_update(schedule_id=default_fees.id, maker_rate="0.5", taker_rate="0.001")
    legacy = FeeSchedule.objects.create(name="legacy", maker_rate=D("0"), taker_rate=D("0.99999999"))
    with pytest.raises(InvalidFeeRate):
        fee_schedule_make_default(schedule_id=legacy.id)
    with pytest.raises(InvalidFeeRate):
        fee_tier_assign(user_id=UserFactory().id, schedule_id=legacy.id)

    assert list(FeeSchedule.objects.order_by("name").values_list("name", "taker_rate", "is_default")) == [
        ("default", D("0.001"), True),
        ("legacy", D("0.99999999"), False),
    ]
    assert not UserFeeTier.objects.exists()
