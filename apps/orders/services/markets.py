"""Market administration: creating a market, its status (halt, resume) and its filters.

Each write takes the market's row lock (``select_for_update(no_key=True)``), the same lock
placements and cancels take (:mod:`apps.orders.services.placement`), so a halt waits for
the placement in progress and every later placement sees it. A status change bumps the
market's sequence and records one book event (:data:`apps.orders.events.book_changed`)
under that lock, and writes its audit row in the same transaction.
"""

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from apps.audit.services import audit_record
from apps.core.errors import DomainError, NotFound
from apps.core.reasons import reason_checked
from apps.ledger.amounts import format_exact
from apps.ledger.models import Asset
from apps.ledger.transactions import retrying_atomic

from ..events import book_changed
from ..models import (
    CommandKind,
    Market,
    MarketStatus,
    market_precision_problems,
    market_symbol,
    market_symbol_problems,
)
from .commands import command_submit, outcome_raise
from .parsing import value_parse


def market_create(
    *,
    base: Asset,
    quote: Asset,
    tick_size: Decimal,
    step_size: Decimal,
    min_qty: Decimal,
    max_qty: Decimal,
    min_notional: Decimal = Decimal(0),
    symbol: str | None = None,
    market_order_price_band: Decimal | None = None,
) -> Market:
    """Create the market ``<base>-<quote>``, active (``symbol``, if given, must be that: it names the assets).

    ``tick_size`` (quote per base) and ``step_size`` (base) must keep every
    ``qty * price`` exact: ``decimals(tick) + decimals(step) <= quote.decimals`` and
    ``decimals(step) <= base.decimals`` (DESIGN.md section 2); ``min_qty`` and ``max_qty``
    are multiples of the step, ``min_notional`` an amount of the quote asset;
    ``market_order_price_band`` as :func:`market_filters_update`.
    One market per pair, and no two symbols the same without their dash (the Binance API's symbol:
    :func:`~apps.orders.models.market_symbol_problems`).
    Raises :class:`DomainError` naming the field (code ``invalid_request``); the database
    refuses the same market by itself (trigger ``precision_rule``, the two unique constraints).
    """
    if base.id == quote.id:
        raise DomainError("Base and quote must differ.", fields={"quote": "Must differ from the base asset."})
    values = {}
    for name, value, decimals in (
        ("tick_size", tick_size, 18),
        ("step_size", step_size, base.decimals),
        ("min_qty", min_qty, base.decimals),
        ("max_qty", max_qty, base.decimals),
    ):
        values[name] = value_parse(value, decimals=decimals, field=name, error=DomainError)
    values["min_notional"] = value_parse(
        min_notional, decimals=quote.decimals, field="min_notional", error=DomainError, allow_zero=True
    )
    symbol = symbol or market_symbol(base, quote)
    problems = market_symbol_problems(base=base, quote=quote, symbol=symbol) | market_precision_problems(
        base=base, quote=quote, tick_size=values["tick_size"], step_size=values["step_size"]
    )
    for name in ("min_qty", "max_qty"):
        if values[name] % values["step_size"]:
            problems[name] = "Must be a multiple of the step size."
    if values["max_qty"] < values["min_qty"]:
        problems["max_qty"] = "Must be at least the minimum quantity."
    if problems:
        raise DomainError("The market's filters are not valid.", fields=problems)
    if market_order_price_band is not None:
        values["market_order_price_band"] = value_parse(
            market_order_price_band, decimals=2, field="market_order_price_band", error=DomainError
        )
    market = Market(symbol=symbol, base=base, quote=quote, **values)
    try:  # a market listed meanwhile by someone else: its symbol or pair is taken (validation, or the constraints)
        market.full_clean()
        with transaction.atomic():
            market.save()
    except ValidationError as invalid:
        fields = {name: " ".join(messages) for name, messages in invalid.message_dict.items()}
        raise DomainError("The market cannot be listed.", fields=fields) from None
    except IntegrityError:
        problems = market_symbol_problems(base=base, quote=quote, symbol=symbol)
        raise DomainError("The market cannot be listed.", fields=problems or {"symbol": "Taken."}) from None
    return market


def market_state(market: Market) -> dict:
    """What the audit log records of a market: status and filters (amounts as plain decimal strings)."""
    return {
        "status": market.status,
        "min_qty": format_exact(market.min_qty),
        "max_qty": format_exact(market.max_qty),
        "min_notional": format_exact(market.min_notional),
        "market_order_price_band": None
        if market.market_order_price_band is None
        else format_exact(market.market_order_price_band),
    }


def _market_set_status(*, market_id: int, status: str, operator_id: int, reason: str, action: str) -> Market:
    """Set the market's status under its row lock and append the audit row, in the caller's transaction."""
    reason = reason_checked(reason)
    market = Market.objects.select_for_update(of=("self",), no_key=True).filter(id=market_id).first()
    if market is None:
        raise NotFound("No such market.", fields={"market": "No such market."})
    before = market_state(market)
    if market.status != status:
        market.status = status
        market.sequence += 1
        market.save(update_fields=["status", "sequence", "updated_at"])
        book_changed.send(
            sender=Market, market_id=market.id, update_id=market.sequence, order_ids=[], taker_order_id=None
        )
    audit_record(
        actor_id=operator_id,
        action=action,
        object_type="orders.market",
        object_id=market.pk,
        before=before,
        after={**market_state(market), "reason": reason},
    )
    return market


@retrying_atomic
def market_status_apply(*, market_id: int, status: str, operator_id: int, reason: str) -> Market:
    """Set the market's status (``active`` or ``halted``) under its row lock, audited (``market.halt`` or
    ``market.resume``): what :func:`market_halt` and :func:`market_resume` run, inline or in the market's
    sequencer. Raises :class:`NotFound`, :class:`DomainError` (no reason, field ``reason``)."""
    action = "market.halt" if status == MarketStatus.HALTED else "market.resume"
    return _market_set_status(market_id=market_id, status=status, operator_id=operator_id, reason=reason, action=action)


def _status_change(
    *, market_id: int, status: str, operator_id: int, reason: str, wait_seconds: float | None = None
) -> Market:
    """:func:`market_status_apply` inline, or as a command of the market's sequencer (``settings.ORDERS_ENGINE``,
    its outcome awaited at most ``wait_seconds``: :func:`~apps.orders.services.commands.command_submit`), so that in
    sequencer mode the sequencer stays the only writer of the market's book and state."""
    if settings.ORDERS_ENGINE == "inline":
        return market_status_apply(market_id=market_id, status=status, operator_id=operator_id, reason=reason)
    reason = reason_checked(reason)
    symbol = Market.objects.filter(id=market_id).values_list("symbol", flat=True).first()
    if symbol is None:
        raise NotFound("No such market.", fields={"market": "No such market."})
    outcome = command_submit(
        market=symbol,
        kind=CommandKind.HALT if status == MarketStatus.HALTED else CommandKind.RESUME,
        user_id=operator_id,
        payload={"market_id": market_id, "operator_id": operator_id, "reason": reason},
        wait_seconds=wait_seconds,
    )
    if "error" in outcome:
        outcome_raise(outcome["error"])
    return Market.objects.get(id=market_id)


def market_halt(*, market_id: int, operator_id: int, reason: str, wait_seconds: float | None = None) -> Market:
    """Halt the market: placements are refused with ``market_halted``; cancels still work.

    ``operator_id`` (a user id) and ``reason`` (required text) go to the audit log
    (``market.halt``) in the same transaction as the halt. Takes the market lock, so it
    waits for the placement in progress; in sequencer mode it is a command of the market's
    sequencer, applied between two of its batches (also raises
    :class:`~apps.orders.errors.OrderStatusUnknown` when no sequencer answers within ``wait_seconds``, by default
    ``settings.ORDERS_ENGINE_WAIT_SECONDS``; the command stays queued). Idempotent (a second halt changes nothing
    but is audited). Raises :class:`NotFound`, :class:`DomainError` (no reason, field ``reason``).
    """
    return _status_change(
        market_id=market_id,
        status=MarketStatus.HALTED,
        operator_id=operator_id,
        reason=reason,
        wait_seconds=wait_seconds,
    )


def market_resume(*, market_id: int, operator_id: int, reason: str, wait_seconds: float | None = None) -> Market:
    """Resume a halted market, audited like :func:`market_halt` (``market.resume``), inline or through the
    sequencer like it (``wait_seconds`` as there). Idempotent. Raises :class:`NotFound`, :class:`DomainError` (no
    reason, field ``reason``).
    """
    return _status_change(
        market_id=market_id,
        status=MarketStatus.ACTIVE,
        operator_id=operator_id,
        reason=reason,
        wait_seconds=wait_seconds,
    )


def market_locked(market_id: int) -> Market:
    """The market with its assets, under its row lock (``FOR NO KEY UPDATE``, as placements take it) in the caller's
    transaction. Raises :class:`NotFound` (field ``market``)."""
    market = (
        Market.objects.select_for_update(of=("self",), no_key=True)
        .select_related("base", "quote")
        .filter(id=market_id)
        .first()
    )
    if market is None:
        raise NotFound("No such market.", fields={"market": "No such market."})
    return market


def market_filters_check(
    market: Market,
    *,
    min_qty: str | Decimal,
    max_qty: str | Decimal,
    min_notional: str | Decimal,
    market_order_price_band: str | Decimal | None = None,
) -> Market:
    """Set the filters on ``market`` (in memory; its ``base`` and ``quote`` loaded) as :func:`market_filters_update`
    would save them, each exact at its asset's precision, and validate them; return ``market`` (unsaved).

    What a drafted change checks before another operator approves it (:mod:`apps.backoffice.services`).
    Raises :class:`DomainError` naming the field.
    """
    market.min_qty = value_parse(min_qty, decimals=market.base.decimals, field="min_qty", error=DomainError)
    market.max_qty = value_parse(max_qty, decimals=market.base.decimals, field="max_qty", error=DomainError)
    market.min_notional = value_parse(
        min_notional, decimals=market.quote.decimals, field="min_notional", error=DomainError, allow_zero=True
    )
    market.market_order_price_band = (
        None
        if market_order_price_band is None
        else value_parse(market_order_price_band, decimals=2, field="market_order_price_band", error=DomainError)
    )
    try:
        market.full_clean()
    except ValidationError as exc:
        fields = {name: " ".join(messages) for name, messages in exc.message_dict.items()}
        raise DomainError("The market's filters are not valid.", fields=fields) from None
    return market


@retrying_atomic
def market_filters_update(
    *,
    market_id: int,
    min_qty: Decimal,
    max_qty: Decimal,
    min_notional: Decimal,
    market_order_price_band: Decimal | None = None,
) -> Market:
    """Change a market's quantity limits, minimum notional and market orders' price protection (tick and step
    are fixed), under its row lock, in one transaction.

    ``market_order_price_band`` is a percentage (0.01 to 100, at most 2 decimals) or ``None`` for no
    protection: a market order then fills no further than that from the best price it meets.

    Applies to orders placed afterwards; resting orders are not touched. In the back office a change is
    maker-checker: drafted by one operator, applied when another approves (:class:`apps.backoffice.models.MarketChange`).
    Raises :class:`DomainError` naming the field, :class:`NotFound`.
    """
    market = market_locked(market_id)
    market_filters_check(
        market,
        min_qty=min_qty,
        max_qty=max_qty,
        min_notional=min_notional,
        market_order_price_band=market_order_price_band,
    )
    market.save(update_fields=["min_qty", "max_qty", "min_notional", "market_order_price_band", "updated_at"])
    return market
