"""Fee schedules and users' fee tiers: the maker and taker rates fills pay.

Rates are fractions (``0.001`` is 0.1 %) with at most 8 decimal places, capped by
``settings.FEE_RATE_MAX``; a placement reads the rates in force with the book
(:mod:`apps.orders.store.book`), so a change applies from the next placement on.
"""

from decimal import Decimal

from django.conf import settings

from apps.core.errors import DomainError, NotFound
from apps.ledger.amounts import parse_amount
from apps.ledger.errors import InvalidAmount
from apps.ledger.transactions import retrying_atomic

from ..errors import InvalidFeeRate
from ..models import RATE_DECIMAL_PLACES, FeeSchedule, UserFeeTier


def fee_rate_parse(raw: str | Decimal, *, field: str) -> Decimal:
    """A maker or taker fee rate (a fraction: ``"0.001"`` is 0.1 %) checked against the cap.

    ``raw`` is a plain decimal string or ``Decimal`` from 0 to ``settings.FEE_RATE_MAX``
    (default 0.01, 1 %) with at most 8 decimal places; more places are refused, not rounded.
    Raises :class:`InvalidFeeRate` naming ``field``.
    """
    try:
        rate = parse_amount(raw, decimals=RATE_DECIMAL_PLACES, field=field, allow_zero=True)
    except InvalidAmount as exc:
        raise InvalidFeeRate(f"{exc.message} (a fraction: 0.001 is 0.1 %)", field=field) from None
    if rate > settings.FEE_RATE_MAX:
        cap, percent = settings.FEE_RATE_MAX.normalize(), (settings.FEE_RATE_MAX * 100).normalize()
        raise InvalidFeeRate(f"At most {cap:f} ({percent:f} %), the limit set by FEE_RATE_MAX.", field=field)
    return rate


def fee_schedule_create(*, name: str, maker_rate: str | Decimal, taker_rate: str | Decimal) -> FeeSchedule:
    """Create a fee schedule (not the default) with rates checked by :func:`fee_rate_parse`.

    Raises :class:`InvalidFeeRate`, :class:`DomainError` naming ``name`` (empty, too long, taken).
    """
    name = name.strip()
    if not name or len(name) > 64:
        raise DomainError("A name of 1 to 64 characters is required.", fields={"name": "1 to 64 characters."})
    maker, taker = fee_rate_parse(maker_rate, field="maker_rate"), fee_rate_parse(taker_rate, field="taker_rate")
    if FeeSchedule.objects.filter(name=name).exists():
        raise DomainError(f"A fee schedule named {name!r} exists.", fields={"name": "Already taken."})
    return FeeSchedule.objects.create(name=name, maker_rate=maker, taker_rate=taker)


@retrying_atomic
def fee_schedule_rates_update(*, schedule_id: int, maker_rate: str | Decimal, taker_rate: str | Decimal) -> FeeSchedule:
    """Set a schedule's maker and taker rates (checked by :func:`fee_rate_parse`); fills from then on pay them.

    Raises :class:`InvalidFeeRate`, :class:`NotFound`.
    """
    maker, taker = fee_rate_parse(maker_rate, field="maker_rate"), fee_rate_parse(taker_rate, field="taker_rate")
    schedule = FeeSchedule.objects.select_for_update().filter(id=schedule_id).first()
    if schedule is None:
        raise NotFound("No such fee schedule.", fields={"schedule": "No such fee schedule."})
    schedule.maker_rate, schedule.taker_rate = maker, taker
    schedule.save(update_fields=["maker_rate", "taker_rate", "updated_at"])
    return schedule


def fee_schedule_cap_check(*, schedule: FeeSchedule) -> None:
    """Refuse a schedule whose rates (set before the cap, or above a lowered cap) exceed ``FEE_RATE_MAX``.

    Raises :class:`InvalidFeeRate` naming the field ``schedule``.
    """
    for field in ("maker_rate", "taker_rate"):
        try:
            fee_rate_parse(getattr(schedule, field), field=field)
        except InvalidFeeRate as exc:
            message = f"{schedule.name}'s {field.replace('_', ' ')}: {exc.fields[field]}"
            raise InvalidFeeRate(message, field="schedule") from None


@retrying_atomic
def fee_schedule_make_default(*, schedule_id: int) -> FeeSchedule:
    """Make a fee schedule the default, taking the default from the previous one in the same transaction.

    There is never a moment without a default. Raises :class:`NotFound`, and
    :class:`InvalidFeeRate` when its rates are above ``settings.FEE_RATE_MAX``.
    """
    schedule = FeeSchedule.objects.select_for_update().filter(id=schedule_id).first()
    if schedule is None:
        raise NotFound("No such fee schedule.")
    fee_schedule_cap_check(schedule=schedule)
    FeeSchedule.objects.filter(is_default=True).exclude(id=schedule_id).update(is_default=False)
    FeeSchedule.objects.filter(id=schedule_id).update(is_default=True)
    schedule.is_default = True
    return schedule


def fee_tier_assign(*, user_id: int, schedule_id: int | None) -> UserFeeTier | None:
    """Make ``user_id`` pay the schedule ``schedule_id`` (``None``: back to the default schedule).

    Applies to fills from the next placement on. Raises :class:`NotFound` for an unknown
    schedule, :class:`InvalidFeeRate` for one whose rates are above ``settings.FEE_RATE_MAX``.
    """
    if schedule_id is None:
        UserFeeTier.objects.filter(user_id=user_id).delete()
        return None
    schedule = FeeSchedule.objects.filter(id=schedule_id).first()
    if schedule is None:
        raise NotFound("No such fee schedule.", fields={"schedule": "No such fee schedule."})
    fee_schedule_cap_check(schedule=schedule)
    tier, _ = UserFeeTier.objects.update_or_create(user_id=user_id, defaults={"schedule_id": schedule_id})
    return tier
