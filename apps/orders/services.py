"""Every write of the orders app: markets, fee tiers, order placement and cancellation.

Placement (:func:`order_place`) is one transaction under the market's row lock
(DESIGN.md sections 6 and 7). It parses the order and checks it against the market's
filters, plans the matching against the book (:mod:`apps.orders.matching`: fills,
self-trade prevention, fill-or-kill, post-only, all decided before anything is
written), then writes: the order row, its hold (``order:<id>:hold``), one journal entry
per fill (``trade:<trade id>``, the fill recipe of DESIGN.md section 4), the releases
of what ended orders still hold (``order:<id>:release``), the trades and the resting
orders' new state. A rejection raises a :class:`~apps.ledger.errors.DomainError` and
the transaction (or, inside a caller's, the savepoint) is rolled back: no order row,
nothing held. Money moves only through :func:`apps.ledger.services.entry_post`.

Locking: the market row is locked with ``UPDATE orders_market SET sequence = sequence
+ 1 ... RETURNING``, which takes the same ``FOR NO KEY UPDATE`` row lock as
``select_for_update(no_key=True)``, bumps the book's sequence and draws the order id in
one statement (ids therefore follow the lock order: time priority). Every write of a
market's orders (placement, cancel) holds that lock, so the book read in the next
statement holds every earlier placement and nothing changes it until commit. The
ledger accounts the placement touches are locked all at once, in id order, by the
statement that writes the order row (:class:`_Accounts`), so two placements on two
markets sharing users take them in the same order and cannot deadlock each other; any
other deadlock or serialization failure runs the whole placement again
(:func:`retrying_atomic`).

Round trips (DESIGN.md section 6, speed from fewer round trips): BEGIN, the lock and the
first book page go in one pipeline; the order row and the account lock in one
statement; the trades and the resting orders' updates in one statement; this module's
statements are prepared once per connection (:class:`apps.ledger.db.PreparedCursor`). A resting
order costs 8 round trips, 4 of them its hold's ``entry_post``, one the stream event. The
account's trading freeze (:data:`apps.accounts.selectors.TRADING_FROZEN_SQL`) is read in the first one.

Streams: every transaction that bumps a market's sequence records exactly one book event
(:func:`apps.streams.services.book_event_record`) with that sequence as its update id, as
its last statement under the lock; the relay publishes them in that order.
"""

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, localcontext

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection
from django.utils import timezone

from apps.accounts.errors import TradingFrozen
from apps.accounts.selectors import TRADING_FROZEN_SQL
from apps.core.errors import DomainError, InvalidState, NotFound
from apps.ledger.amounts import fits, format_amount, format_exact, parse_amount, quantum
from apps.ledger.db import PreparedCursor
from apps.ledger.errors import IdempotencyConflict, InvalidAmount
from apps.ledger.models import AccountKind, Asset, EntryReason
from apps.ledger.services import Leg, entry_post, hold_legs, release_legs, system_account, user_accounts
from apps.ledger.transactions import retrying_atomic
from apps.marketdata.services import candles_record
from apps.streams.services import book_event_record

from .errors import (
    FokNotFillable,
    InvalidFeeRate,
    InvalidPrice,
    InvalidQuantity,
    MarketHalted,
    MinNotional,
    NoFeeSchedule,
    PostOnlyWouldTake,
)
from .matching import (
    EXACT,
    WIDE,
    Fill,
    Maker,
    MatchPlan,
    Stop,
    Taker,
    fee_for,
    plan_match,
)
from .models import (
    OPEN_STATUSES,
    RATE_DECIMAL_PLACES,
    EndReason,
    FeeSchedule,
    Market,
    MarketStatus,
    Order,
    OrderStatus,
    OrderType,
    SelfTradePrevention,
    Side,
    TimeInForce,
    UserFeeTier,
    market_precision_problems,
)

# Resting orders read per query while matching; a taker rarely needs more.
BOOK_PAGE = 32


# Markets and fee tiers ----------------------------------------------------------------------------


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
    """Create the market ``<base>-<quote>`` (or ``symbol``), active.

    ``tick_size`` (quote per base) and ``step_size`` (base) must keep every
    ``qty * price`` exact: ``decimals(tick) + decimals(step) <= quote.decimals`` and
    ``decimals(step) <= base.decimals`` (DESIGN.md section 2); ``min_qty`` and ``max_qty``
    are multiples of the step, ``min_notional`` an amount of the quote asset;
    ``market_order_price_band`` as :func:`market_filters_update`.
    Raises :class:`DomainError` naming the field (code ``invalid_request``); the database
    refuses the same market by itself (trigger ``precision_rule``).
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
        values[name] = _parse(value, decimals=decimals, field=name, error=DomainError)
    values["min_notional"] = _parse(
        min_notional, decimals=quote.decimals, field="min_notional", error=DomainError, allow_zero=True
    )
    problems = market_precision_problems(
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
        values["market_order_price_band"] = _parse(
            market_order_price_band, decimals=2, field="market_order_price_band", error=DomainError
        )
    market = Market(symbol=symbol or f"{base.code}-{quote.code}", base=base, quote=quote, **values)
    market.full_clean()
    market.save()
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
    if not isinstance(reason, str) or not reason.strip():
        raise DomainError("A reason is required.", fields={"reason": "A reason is required."})
    market = Market.objects.select_for_update(of=("self",), no_key=True).filter(id=market_id).first()
    if market is None:
        raise NotFound("No such market.", fields={"market": "No such market."})
    before = market_state(market)
    if market.status != status:
        market.status = status
        market.sequence += 1
        market.save(update_fields=["status", "sequence", "updated_at"])
        book_event_record(market_id=market.id, update_id=market.sequence, order_ids=[], taker_order_id=None)
    # Imported here: the back office's services import this module (fee changes call the fee services).
    from apps.backoffice.services import audit_record

    audit_record(
        actor_id=operator_id,
        action=action,
        object_type="orders.market",
        object_id=market.pk,
        before=before,
        after={**market_state(market), "reason": reason.strip()},
    )
    return market


@retrying_atomic
def market_halt(*, market_id: int, operator_id: int, reason: str) -> Market:
    """Halt the market: placements are refused with ``market_halted``; cancels still work.

    ``operator_id`` (a user id) and ``reason`` (required text) go to the audit log
    (``market.halt``) in the same transaction as the halt. Takes the market lock, so it
    waits for the placement in progress. Idempotent (a second halt changes nothing but is
    audited). Raises :class:`NotFound`, :class:`DomainError` (no reason, field ``reason``).
    """
    return _market_set_status(
        market_id=market_id, status=MarketStatus.HALTED, operator_id=operator_id, reason=reason, action="market.halt"
    )


@retrying_atomic
def market_resume(*, market_id: int, operator_id: int, reason: str) -> Market:
    """Resume a halted market, audited like :func:`market_halt` (``market.resume``). Idempotent.

    Raises :class:`NotFound`, :class:`DomainError` (no reason, field ``reason``).
    """
    return _market_set_status(
        market_id=market_id, status=MarketStatus.ACTIVE, operator_id=operator_id, reason=reason, action="market.resume"
    )


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
    are fixed).

    ``market_order_price_band`` is a percentage (0.01 to 100, at most 2 decimals) or ``None`` for no
    protection: a market order then fills no further than that from the best price it meets.

    Applies to orders placed afterwards; resting orders are not touched.
    Raises :class:`DomainError` naming the field, :class:`NotFound`.
    """
    market = (
        Market.objects.select_for_update(of=("self",), no_key=True)
        .select_related("base", "quote")
        .filter(id=market_id)
        .first()
    )
    if market is None:
        raise NotFound("No such market.", fields={"market": "No such market."})
    market.min_qty = _parse(min_qty, decimals=market.base.decimals, field="min_qty", error=DomainError)
    market.max_qty = _parse(max_qty, decimals=market.base.decimals, field="max_qty", error=DomainError)
    market.min_notional = _parse(
        min_notional, decimals=market.quote.decimals, field="min_notional", error=DomainError, allow_zero=True
    )
    market.market_order_price_band = (
        None
        if market_order_price_band is None
        else _parse(market_order_price_band, decimals=2, field="market_order_price_band", error=DomainError)
    )
    try:
        market.full_clean()
    except ValidationError as exc:
        fields = {name: " ".join(messages) for name, messages in exc.message_dict.items()}
        raise DomainError("The market's filters are not valid.", fields=fields) from None
    market.save(update_fields=["min_qty", "max_qty", "min_notional", "market_order_price_band", "updated_at"])
    return market


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


# Parsing ------------------------------------------------------------------------------------------


def _parse(raw, *, decimals: int, field: str, error: type[DomainError], allow_zero: bool = False) -> Decimal:
    """:func:`parse_amount`, raising ``error`` (with the field) instead of ``InvalidAmount``."""
    try:
        with localcontext(WIDE):  # NUMERIC(38, 18) needs more than the default 28 digits
            return parse_amount(raw, decimals=decimals, field=field, allow_zero=allow_zero)
    except InvalidAmount as exc:
        if error is DomainError:
            raise DomainError(exc.message, fields={field: exc.message}) from None
        raise error(exc.message, field=field) from None


_CHOICE_VALUES = {choices: frozenset(choices.values) for choices in (Side, OrderType, TimeInForce, SelfTradePrevention)}


def _choice(value, choices, field: str, default=None) -> str:
    """``value`` if it is one of ``choices`` (``default`` for ``None``), else a DomainError naming ``field``."""
    if value is None and default is not None:
        return default
    if not isinstance(value, str) or value not in _CHOICE_VALUES[choices]:
        message = f"Must be one of {', '.join(choices.values)}."
        raise DomainError(message, fields={field: message})
    return choices(value)


# The market lock ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _MarketShape:
    """What never changes about a market (database triggers keep it so): ids, tick, step, precisions.

    Kept per process by symbol (:data:`_SHAPES`) so an order can be parsed before the market
    lock is taken, and the lock and the first book page sent together; every placement
    compares it with the locked row and starts over with the row when they differ.
    """

    id: int
    symbol: str
    base_id: int
    quote_id: int
    tick_size: Decimal
    step_size: Decimal
    base_code: str
    base_decimals: int
    quote_code: str
    quote_decimals: int


_SHAPES: dict[str, _MarketShape] = {}


@dataclass(frozen=True)
class _LockedMarket:
    """The market row as read under its lock, with its assets' codes and precisions."""

    id: int
    symbol: str
    base_id: int
    quote_id: int
    tick_size: Decimal
    step_size: Decimal
    min_qty: Decimal
    max_qty: Decimal
    min_notional: Decimal
    status: str
    sequence: int
    base_code: str
    base_decimals: int
    quote_code: str
    quote_decimals: int
    market_order_price_band: Decimal | None

    @property
    def shape(self) -> _MarketShape:
        return _MarketShape(
            self.id,
            self.symbol,
            self.base_id,
            self.quote_id,
            self.tick_size,
            self.step_size,
            self.base_code,
            self.base_decimals,
            self.quote_code,
            self.quote_decimals,
        )


_MARKET_COLUMNS = """m.id, m.symbol, m.base_id, m.quote_id, m.tick_size, m.step_size, m.min_qty, m.max_qty,
    m.min_notional, m.status, m.sequence, b.code, b.decimals, q.code, q.decimals, m.market_order_price_band"""

# The lock of a placement also draws the new order's id: evaluated once the row lock is held, so
# ids (time priority) follow the order in which placements hold the lock.
_LOCK_MARKET_FOR_ORDER = f"""
    UPDATE orders_market m SET sequence = m.sequence + 1
    FROM ledger_asset b, ledger_asset q
    WHERE m.symbol = %s AND b.id = m.base_id AND q.id = m.quote_id
    RETURNING {_MARKET_COLUMNS}, nextval(pg_get_serial_sequence('orders_order', 'id'))
"""

_LOCK_MARKET_OF_ORDER = f"""
    UPDATE orders_market m SET sequence = m.sequence + 1
    FROM ledger_asset b, ledger_asset q
    WHERE m.id = (SELECT market_id FROM orders_order WHERE id = %s) AND b.id = m.base_id AND q.id = m.quote_id
    RETURNING {_MARKET_COLUMNS}
"""


def _refuse_frozen(rows: list[tuple]) -> None:
    """Raise :class:`TradingFrozen` when :data:`~apps.accounts.selectors.TRADING_FROZEN_SQL` found a row."""
    if rows:
        raise TradingFrozen("Trading is frozen on this account; open orders can still be cancelled.")


def _lock_market_for_order(cursor, symbol: str) -> tuple[_LockedMarket, int]:
    """Lock the market row (FOR NO KEY UPDATE, held to commit), bump its book sequence, draw an order id."""
    cursor.execute(_LOCK_MARKET_FOR_ORDER, [symbol])
    return _locked_market_row(cursor.fetchone(), symbol)


def _locked_market_row(row: tuple | None, symbol: str) -> tuple[_LockedMarket, int]:
    if row is None:
        raise NotFound(f"No market {symbol}.", fields={"market": "No such market."})
    return _LockedMarket(*row[:-1]), row[-1]


# Reading the book and the accounts under the lock ---------------------------------------------------

_RATES = """
        LEFT JOIN orders_userfeetier t ON t.user_id = o.user_id
        LEFT JOIN orders_feeschedule s ON s.id = t.schedule_id
        LEFT JOIN orders_feeschedule d ON d.is_default
"""
_TAKER_RATE = """(
        SELECT COALESCE(ts.taker_rate, td.taker_rate)
        FROM (SELECT taker_rate FROM orders_feeschedule WHERE is_default) td
        LEFT JOIN orders_userfeetier tt ON tt.user_id = %s
        LEFT JOIN orders_feeschedule ts ON ts.id = tt.schedule_id
    )"""


def _book_page_sql(side: str, *, limited: bool, after: bool) -> str:
    """Resting orders of ``side`` in price-time priority, optionally within a limit price and after the
    (price, id) key of the previous page; each with its owner's maker fee rate and the taker's rate
    (tier, else default; NULL when there is no default schedule).

    One statement per shape (no ``%s IS NULL OR ...``), so a prepared statement's generic
    plan still scans the book index from the best price.
    """
    asks = side == Side.SELL
    conditions = []
    if limited:
        conditions.append("o.price <= %s" if asks else "o.price >= %s")
    if after:
        conditions.append("(o.price, o.id) > (%s, %s)" if asks else "(o.price < %s OR (o.price = %s AND o.id > %s))")
    return f"""
        SELECT o.id, o.user_id, o.side, o.price, o.qty, o.filled_qty, o.filled_quote_qty, o.fee_total,
               o.held_remaining, COALESCE(s.maker_rate, d.maker_rate), {_TAKER_RATE}
        FROM orders_order o {_RATES}
        WHERE o.market_id = %s AND o.side = '{side}' AND o.status IN ('open', 'partially_filled')
              {"".join(" AND " + condition for condition in conditions)}
        ORDER BY o.price{"" if asks else " DESC"}, o.id
        LIMIT %s
    """


_BOOK_PAGE_SQL = {
    (side, limited, after): _book_page_sql(side, limited=limited, after=after)
    for side in (Side.SELL, Side.BUY)
    for limited in (False, True)
    for after in (False, True)
}


class _Book:
    """The resting orders a taker may match, best first, read page by page under the market lock.

    Iterating yields :class:`Maker` rows of ``side`` crossing ``limit_price`` (all when
    ``None``); ``taker_rate`` is the taker's fee rate, read with the first page.
    """

    def __init__(
        self,
        cursor,
        *,
        market_id: int,
        side: str,
        limit_price: Decimal | None,
        taker_id: int,
        page: int = BOOK_PAGE,
        first_page: list[tuple] | None = None,
    ):
        self.cursor, self.market_id, self.side, self.limit_price = cursor, market_id, side, limit_price
        self.taker_id, self.page, self.first_page = taker_id, page, first_page
        self.taker_rate: Decimal | None = None

    def page_query(self, after: tuple[Decimal, int] | None = None) -> tuple[str, list]:
        """The statement and parameters of the page after the ``(price, id)`` key ``after``."""
        limited = self.limit_price is not None
        params = [self.taker_id, self.market_id, *([self.limit_price] if limited else [])]
        if after is not None:
            params += [after[0], after[1]] if self.side == Side.SELL else [after[0], after[0], after[1]]
        return _BOOK_PAGE_SQL[self.side, limited, after is not None], [*params, self.page]

    def __iter__(self) -> Iterator[Maker]:
        after: tuple[Decimal, int] | None = None
        while True:
            if after is None and self.first_page is not None:
                rows = self.first_page
            else:
                self.cursor.execute(*self.page_query(after))
                rows = self.cursor.fetchall()
            for row in rows:
                if row[9] is None or row[10] is None:
                    raise NoFeeSchedule("Trading is paused: no default fee schedule is set.")
                self.taker_rate = row[10]
                yield Maker(*row[:10])
            if len(rows) < self.page:
                return
            after = (rows[-1][3], rows[-1][0])


_LOCK_ACCOUNTS = """
    SELECT id, owner_id, asset_id, kind, shard FROM ledger_account
    WHERE asset_id = ANY(%s::bigint[])
      AND ((owner_id = ANY(%s::bigint[]) AND kind IN ('user_available', 'user_held'))
           OR (owner_id IS NULL AND kind = 'fee_revenue' AND shard = ANY(%s::int[])))
    ORDER BY id
    FOR NO KEY UPDATE
"""


def fee_revenue_shard(idempotency_key: str) -> int:
    """The ``fee_revenue`` shard :func:`apps.ledger.services.system_account` names for ``idempotency_key``."""
    return zlib.crc32(idempotency_key.encode()) % settings.LEDGER_FEE_REVENUE_SHARDS


class _Accounts:
    """The ledger accounts a placement or cancel touches, found and locked in one ordered statement.

    For each user, the available and held accounts of both assets; the fee revenue
    shards of the trade keys. Locking them all at once, in id order, before the first
    entry means two placements (on two markets sharing users) take their account locks
    in the same global order and cannot deadlock; each ``entry_post`` then re-locks rows
    this transaction already holds. To save a round trip the lock rides on the
    statement written just before it (``with_statement``: a data-modifying ``WITH``).
    Missing user accounts are created through the ledger's services (their first use).
    """

    def __init__(
        self,
        cursor,
        *,
        user_ids: set[int],
        assets: list[Asset],
        fee_shards: set[int],
        with_statement: str = "",
        with_params: list | None = None,
    ):
        self.assets = {asset.id: asset for asset in assets}
        self.users: dict[tuple[int, int, str], int] = {}
        self.fee_shards: dict[tuple[int, int], int] = {}
        sql = f"WITH written AS ({with_statement}) {_LOCK_ACCOUNTS}" if with_statement else _LOCK_ACCOUNTS
        cursor.execute(sql, [*(with_params or []), list(self.assets), list(user_ids), list(fee_shards)])
        for account_id, owner_id, asset_id, kind, shard in cursor.fetchall():
            if owner_id is None:
                self.fee_shards[(asset_id, shard)] = account_id
            else:
                self.users[(owner_id, asset_id, kind)] = account_id
        for user_id in user_ids:
            for asset in assets:
                keys = [(user_id, asset.id, kind) for kind in (AccountKind.USER_AVAILABLE, AccountKind.USER_HELD)]
                if not all(key in self.users for key in keys):
                    available, held = user_accounts(user_id, asset)
                    self.users[keys[0]], self.users[keys[1]] = available.id, held.id

    def available(self, user_id: int, asset_id: int) -> int:
        return self.users[(user_id, asset_id, AccountKind.USER_AVAILABLE)]

    def held(self, user_id: int, asset_id: int) -> int:
        return self.users[(user_id, asset_id, AccountKind.USER_HELD)]

    def fee_revenue(self, asset_id: int, idempotency_key: str) -> int:
        """The fee revenue shard account for the entry ``idempotency_key`` (created on first use)."""
        account_id = self.fee_shards.get((asset_id, fee_revenue_shard(idempotency_key)))
        if account_id is None:
            account = system_account(AccountKind.FEE_REVENUE, self.assets[asset_id], shard_key=idempotency_key)
            account_id = self.fee_shards[(asset_id, account.shard)] = account.id
        return account_id


# Placement ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Request:
    """An order request, parsed and checked against the market's filters."""

    user_id: int
    side: str
    type: str
    price: Decimal | None
    qty: Decimal | None
    quote_qty: Decimal | None
    time_in_force: str
    post_only: bool
    stp: str
    client_order_id: str


def _request_parse(
    market: _MarketShape | _LockedMarket,
    *,
    user_id: int,
    side,
    type,
    price,
    qty,
    quote_qty,
    time_in_force,
    post_only,
    stp,
    client_order_id,
) -> _Request:
    """Parse the inputs and check them against the market's tick, step and precisions.

    Raises :class:`DomainError` (code ``invalid_request``) for a malformed choice,
    :class:`InvalidPrice`, :class:`InvalidQuantity`. The quantity limits are checked under
    the lock (:func:`_check_limits`), ``min_notional`` once a market order's reference
    price is known.
    """
    side = _choice(side, Side, "side")
    type = _choice(type, OrderType, "type")
    stp = _choice(stp, SelfTradePrevention, "stp", default=SelfTradePrevention.EXPIRE_TAKER)
    time_in_force = _choice(
        time_in_force,
        TimeInForce,
        "time_in_force",
        default=TimeInForce.GTC if type == OrderType.LIMIT else TimeInForce.IOC,
    )
    if not isinstance(post_only, bool):
        raise DomainError("Must be true or false.", fields={"post_only": "Must be true or false."})
    if not isinstance(client_order_id, str) or len(client_order_id) > 64:
        raise DomainError("At most 64 characters.", fields={"client_order_id": "At most 64 characters."})

    if type == OrderType.LIMIT:
        if price is None:
            raise InvalidPrice("A limit order needs a price.", field="price")
        if qty is None:
            raise InvalidQuantity("A limit order needs a quantity.", field="qty")
        if quote_qty is not None:
            raise InvalidQuantity("Only a market buy takes a quote quantity.", field="quote_qty")
        price = _parse(price, decimals=market.quote_decimals, field="price", error=InvalidPrice)
        if price % market.tick_size:
            raise InvalidPrice(f"Must be a multiple of the tick size {market.tick_size.normalize():f}.", field="price")
    else:
        if price is not None:
            raise InvalidPrice("A market order takes no price.", field="price")
        if post_only:
            raise DomainError("Only a limit order can be post-only.", fields={"post_only": "Only for limit orders."})
        if time_in_force == TimeInForce.GTC:
            message = "A market order is immediate: IOC or FOK."
            raise DomainError(message, fields={"time_in_force": message})
        if (qty is None) == (quote_qty is None):
            field = "qty" if side == Side.SELL or qty is not None else "quote_qty"
            message = "A market buy takes either qty or quote_qty." if side == Side.BUY else "A market sell takes qty."
            raise InvalidQuantity(message, field=field)
        if quote_qty is not None and side == Side.SELL:
            raise InvalidQuantity("A market sell takes qty.", field="quote_qty")
    if post_only and time_in_force != TimeInForce.GTC:
        raise DomainError("A post-only order rests: GTC.", fields={"time_in_force": "Must be GTC when post-only."})

    if qty is not None:
        qty = _parse(qty, decimals=market.base_decimals, field="qty", error=InvalidQuantity)
        if qty % market.step_size:
            raise InvalidQuantity(f"Must be a multiple of the step size {market.step_size.normalize():f}.", field="qty")
    if quote_qty is not None:
        quote_qty = _parse(quote_qty, decimals=market.quote_decimals, field="quote_qty", error=InvalidQuantity)
    return _Request(user_id, side, type, price, qty, quote_qty, time_in_force, post_only, stp, client_order_id)


def _check_limits(market: _LockedMarket, request: _Request) -> None:
    """The quantity within the market's ``min_qty``..``max_qty`` (as locked: operators change them)."""
    if request.qty is not None and request.qty < market.min_qty:
        raise InvalidQuantity(f"Must be at least {market.min_qty.normalize():f}.", field="qty")
    if request.qty is not None and request.qty > market.max_qty:
        raise InvalidQuantity(f"Must be at most {market.max_qty.normalize():f}.", field="qty")


def _book_for(
    cursor, market: _MarketShape | _LockedMarket, request: _Request, first_page: list[tuple] | None = None
) -> "_Book":
    """The side of ``market``'s book that ``request`` may match (one row is enough for post-only)."""
    return _Book(
        cursor,
        market_id=market.id,
        side=Side.SELL if request.side == Side.BUY else Side.BUY,
        limit_price=request.price,
        taker_id=request.user_id,
        page=1 if request.post_only else BOOK_PAGE,
        first_page=first_page,
    )


def _check_notional(market: _LockedMarket, request: _Request, plan: MatchPlan) -> None:
    """The order's value in quote must reach ``min_notional``.

    Limit: ``qty * price``. Market buy by budget: the budget. Market by base quantity:
    ``qty`` at the best resting price met (no check on an empty book: nothing fills).
    """
    if request.quote_qty is not None:
        value, field = request.quote_qty, "quote_qty"
    elif request.price is not None:
        value, field = EXACT.multiply(request.qty, request.price), "qty"
    elif plan.first_price is not None:
        value, field = EXACT.multiply(request.qty, plan.first_price), "qty"
    else:
        return
    if value < market.min_notional:
        raise MinNotional(
            f"Order value {format_amount(value, market.quote_decimals)} {market.quote_code} is below the minimum "
            f"{format_amount(market.min_notional, market.quote_decimals)}.",
            field=field,
        )


def _find_replay(request: _Request, market: _LockedMarket) -> Order | None:
    """The order already placed with this ``client_order_id``; a different request is a conflict."""
    order = Order.objects.filter(user_id=request.user_id, client_order_id=request.client_order_id).first()
    if order is None:
        return None
    same = (
        order.market_id == market.id
        and order.side == request.side
        and order.type == request.type
        and order.price == request.price
        and order.qty == request.qty
        and order.quote_qty == request.quote_qty
        and order.time_in_force == request.time_in_force
        and order.post_only == request.post_only
        and order.stp == request.stp
    )
    if not same:
        raise IdempotencyConflict(
            f"client_order_id {request.client_order_id!r} was already used for another order.",
            fields={"client_order_id": "Already used for another order."},
        )
    return order


_INSERT_ORDER = """
    INSERT INTO orders_order
        (id, market_id, user_id, client_order_id, side, type, price, qty, quote_qty, time_in_force, post_only, stp,
         status, reject_reason, filled_qty, filled_quote_qty, fee_total, held_asset_id, held_amount, held_remaining,
         created_at, updated_at)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""

_ORDER_FIELDS = [field.attname for field in Order._meta.concrete_fields]
_ORDER_BY_ID = f"SELECT {', '.join(_ORDER_FIELDS)} FROM orders_order WHERE id = %s"

_CANCEL_ORDER = """
    UPDATE orders_order SET status = 'cancelled', reject_reason = %s, held_remaining = 0, updated_at = %s
    WHERE id = %s
"""

_UPDATE_MAKERS = """
    UPDATE orders_order o
    SET filled_qty = v.filled_qty, filled_quote_qty = v.filled_quote_qty, fee_total = v.fee_total,
        held_remaining = v.held_remaining, status = v.status, reject_reason = v.reject_reason, updated_at = %s
    FROM unnest(%s::bigint[], %s::numeric[], %s::numeric[], %s::numeric[], %s::numeric[], %s::text[], %s::text[])
        AS v(id, filled_qty, filled_quote_qty, fee_total, held_remaining, status, reject_reason)
    WHERE o.id = v.id
"""

_INSERT_TRADES = """
    INSERT INTO orders_trade
        (id, market_id, taker_order_id, maker_order_id, seq, taker_user_id, maker_user_id, taker_side, price, qty,
         quote_qty, taker_fee, maker_fee, taker_fee_rate, maker_fee_rate, entry_id, created_at)
    SELECT v.id, %s, %s, v.maker_order_id, v.seq, %s, v.maker_user_id, %s, v.price, v.qty, v.quote_qty,
           v.taker_fee, v.maker_fee, %s, v.maker_fee_rate, v.entry_id, %s
    FROM unnest(%s::text[], %s::bigint[], %s::int[], %s::bigint[], %s::numeric[], %s::numeric[], %s::numeric[],
                %s::numeric[], %s::numeric[], %s::numeric[], %s::bigint[])
        AS v(id, maker_order_id, seq, maker_user_id, price, qty, quote_qty, taker_fee, maker_fee, maker_fee_rate,
             entry_id)
"""


def _post_hold(*, order_id: int, user_id: int, asset_id: int, amount: Decimal, accounts: _Accounts) -> None:
    """Dr user_available, Cr user_held (``order:<id>:hold``); raises InsufficientFunds, nothing written."""
    entry_post(
        idempotency_key=f"order:{order_id}:hold",
        reason=EntryReason.ORDER_HOLD,
        legs=hold_legs(
            available_id=accounts.available(user_id, asset_id), held_id=accounts.held(user_id, asset_id), amount=amount
        ),
        reference_type="order",
        reference_id=str(order_id),
    )


def _post_release(*, order_id: int, user_id: int, asset_id: int, amount: Decimal, accounts: _Accounts) -> None:
    """Dr user_held, Cr user_available (``order:<id>:release``): the order's whole remaining hold, once."""
    entry_post(
        idempotency_key=f"order:{order_id}:release",
        reason=EntryReason.ORDER_RELEASE,
        legs=release_legs(
            held_id=accounts.held(user_id, asset_id), available_id=accounts.available(user_id, asset_id), amount=amount
        ),
        reference_type="order",
        reference_id=str(order_id),
    )


@dataclass
class _Settlement:
    """A planned fill with its trade number and fees (in the asset each side receives)."""

    fill: Fill
    seq: int
    taker_fee: Decimal
    maker_fee: Decimal
    trade_id: str = ""
    entry_id: int = 0


def _settlements(market: _LockedMarket, taker_side: str, taker_rate: Decimal, plan: MatchPlan) -> list[_Settlement]:
    """Number the plan's fills from 1 and price their fees: the buyer pays in base, the seller in quote.

    Each fee is ``received * rate`` rounded up to the received asset's precision.
    """
    settlements = []
    for seq, fill in enumerate(plan.fills, start=1):
        if taker_side == Side.BUY:
            taker_fee = fee_for(fill.qty, taker_rate, market.base_decimals)
            maker_fee = fee_for(fill.quote_qty, fill.maker.fee_rate, market.quote_decimals)
        else:
            taker_fee = fee_for(fill.quote_qty, taker_rate, market.quote_decimals)
            maker_fee = fee_for(fill.qty, fill.maker.fee_rate, market.base_decimals)
        settlements.append(_Settlement(fill, seq, taker_fee, maker_fee))
    return settlements


def _post_fill(
    *,
    market: _LockedMarket,
    taker_order_id: int,
    taker_user_id: int,
    taker_side: str,
    settlement: _Settlement,
    accounts: _Accounts,
) -> None:
    """One journal entry for one fill (DESIGN.md section 4), key ``trade:<taker order id>-<seq>``.

    Base: Dr seller user_held ``qty``; Cr buyer user_available ``qty - buyer fee``; Cr
    fee_revenue the buyer fee. Quote: Dr buyer user_held ``V = qty * maker price``; Cr
    seller user_available ``V - seller fee``; Cr fee_revenue the seller fee. Zero legs
    (a zero fee, or a fee that takes all of a one-unit fill) are left out.
    """
    fill = settlement.fill
    maker = fill.maker
    key = f"trade:{settlement.trade_id}"
    if taker_side == Side.BUY:
        buyer, seller = taker_user_id, maker.user_id
        buyer_fee, seller_fee = settlement.taker_fee, settlement.maker_fee
    else:
        buyer, seller = maker.user_id, taker_user_id
        buyer_fee, seller_fee = settlement.maker_fee, settlement.taker_fee
    base, quote = market.base_id, market.quote_id
    legs = [Leg(accounts.held(seller, base), fill.qty), Leg(accounts.held(buyer, quote), fill.quote_qty)]
    if fill.qty - buyer_fee:
        legs.append(Leg(accounts.available(buyer, base), buyer_fee - fill.qty))
    if fill.quote_qty - seller_fee:
        legs.append(Leg(accounts.available(seller, quote), seller_fee - fill.quote_qty))
    if buyer_fee:
        legs.append(Leg(accounts.fee_revenue(base, key), -buyer_fee))
    if seller_fee:
        legs.append(Leg(accounts.fee_revenue(quote, key), -seller_fee))
    entry = entry_post(
        idempotency_key=key,
        reason=EntryReason.TRADE,
        legs=legs,
        reference_type="trade",
        reference_id=settlement.trade_id,
        metadata={"market": market.symbol, "taker_order": taker_order_id, "maker_order": maker.id},
    )
    settlement.entry_id = entry.id


def _outcome(request: _Request, plan: MatchPlan) -> tuple[str, str]:
    """The taker's ``(status, reject_reason)`` once the plan has run; ``open``/``partially_filled`` rest."""
    filled = plan.filled_qty
    if plan.stop is Stop.FILLED:
        return OrderStatus.FILLED, EndReason.NONE
    if plan.stop is Stop.SELF_TRADE:
        return OrderStatus.EXPIRED, EndReason.SELF_TRADE_PREVENTION
    if request.type == OrderType.LIMIT and request.time_in_force == TimeInForce.GTC:
        return (OrderStatus.PARTIALLY_FILLED if filled else OrderStatus.OPEN), EndReason.NONE
    if plan.stop is Stop.BUDGET and filled:
        return OrderStatus.FILLED, EndReason.NONE  # what is left cannot buy one more step
    if request.type == OrderType.MARKET and plan.stop is Stop.BOOK:
        return OrderStatus.EXPIRED, EndReason.NO_LIQUIDITY
    if plan.stop is Stop.PRICE_BAND:
        return OrderStatus.EXPIRED, EndReason.PRICE_PROTECTION
    return OrderStatus.EXPIRED, EndReason.UNFILLED_REMAINDER


@retrying_atomic
def order_place(
    *,
    user_id: int,
    market: str,
    side: str,
    type: str = OrderType.LIMIT,
    price: str | Decimal | None = None,
    qty: str | Decimal | None = None,
    quote_qty: str | Decimal | None = None,
    time_in_force: str | None = None,
    post_only: bool = False,
    stp: str | None = None,
    client_order_id: str = "",
) -> Order:
    """Place an order on the market ``market`` (symbol) and match it at once; return the order as it ends up.

    Arguments are the API's order fields. Amounts are plain decimal strings or
    ``Decimal``: ``price`` in quote per base (a multiple of the tick), ``qty`` in base (a
    multiple of the step, within ``min_qty``..``max_qty``), ``quote_qty`` a market buy's
    budget in quote. ``time_in_force`` defaults to GTC for limit orders and IOC for
    market orders; ``stp`` (self-trade prevention) to ``expire_taker``.

    What is held (``order:<id>:hold``, Dr available, Cr held): a limit buy ``qty *
    price`` quote; a market buy by budget the budget; a sell ``qty`` base; a market buy
    by base quantity the exact cost of its fills, found by walking the book under the
    lock before anything is written (so it never holds more or less than it spends; a
    user who cannot pay for the whole walk gets ``insufficient_funds``). Each fill
    (``trade:<taker order id>-<n>``) executes at the maker's price and consumes that from
    the hold; when the order ends, what is left is released (``order:<id>:release``),
    which returns a buyer's price improvement and a budget's unspendable dust. A GTC
    limit remainder rests in the book holding what is left. A market order on a market with
    a ``market_order_price_band`` fills no further than that percentage from the best price
    it meets; the rest ends ``expired`` with the reason ``price_protection``.

    Status: ``filled``; ``open``/``partially_filled`` (resting); ``expired`` (IOC or
    market remainder, empty book, self-trade prevention of the taker).

    Raises, with nothing written and nothing held: :class:`~apps.accounts.errors.TradingFrozen`
    (an operator froze the account's trading), :class:`NotFound` (market),
    :class:`MarketHalted`, :class:`InvalidPrice`, :class:`InvalidQuantity`,
    :class:`MinNotional`, :class:`PostOnlyWouldTake`, :class:`FokNotFillable`,
    :class:`~apps.ledger.errors.InsufficientFunds`, :class:`DomainError` (malformed
    choice), :class:`IdempotencyConflict` (``client_order_id`` reused for another order;
    the same order again returns the original). Keeps invariants 3, 4 and 8: an ended
    order holds nothing, an open one holds exactly its ``held_remaining``.
    """
    inputs = {
        "user_id": user_id,
        "side": side,
        "type": type,
        "price": price,
        "qty": qty,
        "quote_qty": quote_qty,
        "time_in_force": time_in_force,
        "post_only": post_only,
        "stp": stp,
        "client_order_id": client_order_id,
    }
    with PreparedCursor() as cursor, localcontext(WIDE):
        request = first_page = None
        shape = _SHAPES.get(market)
        if shape is not None:
            try:
                request = _request_parse(shape, **inputs)
            except DomainError:
                pass  # judged again with the market as locked (the shape kept here may be out of date)
        if request is not None:
            # One round trip: BEGIN, the market lock (which draws the order id), the first book page
            # and the account's trading freeze.
            book = _book_for(cursor, shape, request)
            lock_rows, first_page, frozen = cursor.pipeline(
                [(_LOCK_MARKET_FOR_ORDER, [market]), book.page_query(), (TRADING_FROZEN_SQL, [user_id])]
            )
            _refuse_frozen(frozen)
            locked, order_id = _locked_market_row(lock_rows[0] if lock_rows else None, market)
            if locked.shape != shape:
                request = first_page = None
        else:
            cursor.execute(TRADING_FROZEN_SQL, [user_id])
            _refuse_frozen(cursor.fetchall())
            locked, order_id = _lock_market_for_order(cursor, market)
        _SHAPES[market] = locked.shape
        if request is None:
            request = _request_parse(locked, **inputs)
        if request.client_order_id:
            replay = _find_replay(request, locked)
            if replay is not None:  # the lock bumped the sequence: an event with no change keeps ids gapless
                book_event_record(market_id=locked.id, update_id=locked.sequence, order_ids=[], taker_order_id=None)
                return replay
        _check_limits(locked, request)
        book = _book_for(cursor, locked, request, first_page=first_page)
        if locked.status != MarketStatus.ACTIVE:
            raise MarketHalted(f"Market {locked.symbol} is halted.", field="market")

        taker = Taker(request.user_id, request.side, request.price, request.qty, request.quote_qty, request.stp)
        if request.post_only:
            best = next(iter(book), None)
            if best is not None and taker.crosses(best.price):
                raise PostOnlyWouldTake(
                    f"Would match the resting order at {best.price.normalize():f}.", field="post_only"
                )
            plan = MatchPlan()
        else:
            band = locked.market_order_price_band if request.type == OrderType.MARKET else None
            plan = plan_match(taker, book, step_size=locked.step_size, price_band=band)
        _check_notional(locked, request, plan)
        status, reject_reason = _outcome(request, plan)
        if request.time_in_force == TimeInForce.FOK and status != OrderStatus.FILLED:
            raise FokNotFillable("The order cannot be filled completely now.", field="time_in_force")
        return _execute(cursor, locked, order_id, request, plan, book.taker_rate, status, reject_reason)


def _execute(
    cursor,
    market: _LockedMarket,
    order_id: int,
    request: _Request,
    plan: MatchPlan,
    taker_rate: Decimal | None,
    status: str,
    reject_reason: str,
) -> Order:
    """Write the planned placement: order row, hold, one entry per fill, releases, trades, resting orders."""
    buy = request.side == Side.BUY
    held_asset_id = market.quote_id if buy else market.base_id
    with localcontext(EXACT):
        filled_qty = plan.filled_qty
        filled_quote_qty = plan.filled_quote_qty
        if not buy:
            held_amount = request.qty
        elif request.quote_qty is not None:
            held_amount = request.quote_qty
        elif request.price is not None:
            held_amount = request.qty * request.price
        else:
            held_amount = filled_quote_qty  # market buy by base quantity: the exact cost of its fills
        held_left = held_amount - (filled_quote_qty if buy else filled_qty)
    if not fits(held_amount):
        raise InvalidQuantity(f"The order's value {held_amount:f} is beyond what an amount can be.", field="qty")
    if held_left < 0:
        raise AssertionError(f"the fills consume more than the hold {held_amount}")
    ended = status not in OPEN_STATUSES

    taker_rate = taker_rate if plan.fills else Decimal(0)
    settlements = _settlements(market, request.side, taker_rate, plan)
    taker_fee_total = sum((s.taker_fee for s in settlements), Decimal(0))

    now = timezone.now()
    base_q, quote_q = quantum(market.base_decimals), quantum(market.quote_decimals)
    held_q = quote_q if buy else base_q
    order = Order(
        id=order_id,
        market_id=market.id,
        user_id=request.user_id,
        client_order_id=request.client_order_id,
        side=request.side,
        type=request.type,
        price=request.price,
        qty=request.qty,
        quote_qty=request.quote_qty,
        time_in_force=request.time_in_force,
        post_only=request.post_only,
        stp=request.stp,
        status=status,
        reject_reason=reject_reason,
        filled_qty=filled_qty.quantize(base_q),
        filled_quote_qty=filled_quote_qty.quantize(quote_q),
        fee_total=taker_fee_total.quantize(base_q if buy else quote_q),
        held_asset_id=held_asset_id,
        held_amount=held_amount.quantize(held_q),
        held_remaining=(Decimal(0) if ended else held_left).quantize(held_q),
        created_at=now,
        updated_at=now,
    )
    for settlement in settlements:
        settlement.trade_id = f"{order.id}-{settlement.seq}"
    users = {order.user_id} | {fill.maker.user_id for fill in plan.fills} | {m.user_id for m in plan.expired_makers}
    accounts = _insert_order_and_lock_accounts(
        cursor,
        order,
        user_ids=users,
        assets=_assets(market),
        fee_shards={fee_revenue_shard(f"trade:{s.trade_id}") for s in settlements},
    )
    if held_amount:
        _post_hold(
            order_id=order.id, user_id=order.user_id, asset_id=held_asset_id, amount=held_amount, accounts=accounts
        )
    for settlement in settlements:
        _post_fill(
            market=market,
            taker_order_id=order.id,
            taker_user_id=order.user_id,
            taker_side=order.side,
            settlement=settlement,
            accounts=accounts,
        )
    if ended and held_left:
        _post_release(
            order_id=order.id, user_id=order.user_id, asset_id=held_asset_id, amount=held_left, accounts=accounts
        )
    if settlements or plan.expired_makers:
        _record_trades_and_update_makers(cursor, market, order, taker_rate, settlements, plan.expired_makers, accounts)
    candles_record(market_id=market.id, time=now, fills=plan.fills)
    book_event_record(
        market_id=market.id,
        update_id=market.sequence,
        order_ids=[order.id, *(fill.maker.id for fill in plan.fills), *(maker.id for maker in plan.expired_makers)],
        taker_order_id=order.id,
    )
    return order


def _assets(market: _LockedMarket) -> list[Asset]:
    """The market's base and quote as (unsaved, partial) Asset instances: id, code and decimals."""
    return [
        Asset(id=market.base_id, code=market.base_code, decimals=market.base_decimals),
        Asset(id=market.quote_id, code=market.quote_code, decimals=market.quote_decimals),
    ]


def _insert_order_and_lock_accounts(
    cursor, order: Order, *, user_ids: set[int], assets: list[Asset], fee_shards: set[int]
) -> _Accounts:
    """INSERT the order row and lock the placement's accounts, in one statement.

    A ``client_order_id`` taken meanwhile (by a placement on another market) is an
    :class:`IdempotencyConflict`.
    """
    try:
        return _Accounts(
            cursor,
            user_ids=user_ids,
            assets=assets,
            fee_shards=fee_shards,
            with_statement=_INSERT_ORDER,
            with_params=[
                order.id,
                order.market_id,
                order.user_id,
                order.client_order_id,
                str(order.side),
                str(order.type),
                order.price,
                order.qty,
                order.quote_qty,
                str(order.time_in_force),
                order.post_only,
                str(order.stp),
                str(order.status),
                str(order.reject_reason),
                order.filled_qty,
                order.filled_quote_qty,
                order.fee_total,
                order.held_asset_id,
                order.held_amount,
                order.held_remaining,
                order.created_at,
                order.updated_at,
            ],
        )
    except IntegrityError as exc:
        constraint = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
        if constraint == "order_client_id_per_user":
            raise IdempotencyConflict(
                f"client_order_id {order.client_order_id!r} is being used by another order.",
                fields={"client_order_id": "Already used for another order."},
            ) from None
        raise


def _record_trades_and_update_makers(
    cursor,
    market: _LockedMarket,
    order: Order,
    taker_rate: Decimal,
    settlements: list[_Settlement],
    expired: list[Maker],
    accounts: _Accounts,
) -> None:
    """Insert the placement's trades and apply fills and self-trade expiries to the resting orders.

    One statement (the trades' INSERT in a ``WITH``, the resting orders' UPDATE); before
    it, the release of what each resting order that ended still holds.
    """
    makers_buy = order.side == Side.SELL
    held_asset_id = market.quote_id if makers_buy else market.base_id
    rows: list[tuple[Maker, str, str]] = []
    with localcontext(EXACT):
        for s in settlements:
            maker = s.fill.maker
            maker.filled_qty += s.fill.qty
            maker.filled_quote_qty += s.fill.quote_qty
            maker.fee_total += s.maker_fee
            maker.held_remaining -= s.fill.quote_qty if makers_buy else s.fill.qty
            if maker.held_remaining < 0:
                raise AssertionError(f"order {maker.id}: a fill consumes more than its hold")
            rows.append(
                (maker, OrderStatus.FILLED if maker.remaining == 0 else OrderStatus.PARTIALLY_FILLED, EndReason.NONE)
            )
    rows += [(maker, OrderStatus.EXPIRED, EndReason.SELF_TRADE_PREVENTION) for maker in expired]
    for maker, status, _ in rows:
        if status not in OPEN_STATUSES and maker.held_remaining:
            _post_release(
                order_id=maker.id,
                user_id=maker.user_id,
                asset_id=held_asset_id,
                amount=maker.held_remaining,
                accounts=accounts,
            )
            maker.held_remaining = Decimal(0)
    makers_params = [
        order.updated_at,
        [m.id for m, _, _ in rows],
        [m.filled_qty for m, _, _ in rows],
        [m.filled_quote_qty for m, _, _ in rows],
        [m.fee_total for m, _, _ in rows],
        [m.held_remaining for m, _, _ in rows],
        [str(status) for _, status, _ in rows],
        [str(reason) for _, _, reason in rows],
    ]
    if not settlements:
        cursor.execute(_UPDATE_MAKERS, makers_params)
        return
    trades_params = [
        market.id,
        order.id,
        order.user_id,
        str(order.side),
        taker_rate,
        order.created_at,
        [s.trade_id for s in settlements],
        [s.fill.maker.id for s in settlements],
        [s.seq for s in settlements],
        [s.fill.maker.user_id for s in settlements],
        [s.fill.price for s in settlements],
        [s.fill.qty for s in settlements],
        [s.fill.quote_qty for s in settlements],
        [s.taker_fee for s in settlements],
        [s.maker_fee for s in settlements],
        [s.fill.maker.fee_rate for s in settlements],
        [s.entry_id for s in settlements],
    ]
    cursor.execute(f"WITH trades AS ({_INSERT_TRADES}) {_UPDATE_MAKERS}", trades_params + makers_params)


# Cancel -------------------------------------------------------------------------------------------


@retrying_atomic
def order_cancel(*, order_id: int, user_id: int | None = None, by_operator: bool = False) -> Order:
    """Cancel an open order and release its whole remaining hold (``order:<id>:release``), exactly once.

    ``user_id``: the owner asking (an order of another user is :class:`NotFound`);
    ``None`` for an operator or the system (``by_operator`` records who). Takes the
    market lock, so it never interleaves with a placement that fills the order: the
    order is either filled first (and the cancel releases what is left, or finds it
    ended) or cancelled first (and the placement no longer sees it). Works on a halted
    market. Raises :class:`NotFound`, :class:`InvalidState` (409) when the order has
    already ended. Keeps invariants 4 and 8.
    """
    with PreparedCursor() as cursor:
        # One round trip: BEGIN, the market lock, then the order as the lock's previous holder left it.
        market_rows, order_rows = cursor.pipeline([(_LOCK_MARKET_OF_ORDER, [order_id]), (_ORDER_BY_ID, [order_id])])
        order = Order.from_db(connection.alias, _ORDER_FIELDS, order_rows[0]) if market_rows and order_rows else None
        if order is None or (user_id is not None and order.user_id != user_id):
            raise NotFound(f"No order {order_id}.", fields={"order": "No such order."})
        market = _LockedMarket(*market_rows[0])
        if order.status not in OPEN_STATUSES:
            message = f"Order {order_id} is {order.status}: it can no longer be cancelled."
            raise InvalidState(message, fields={"order": message})
        release = order.held_remaining
        order.status = OrderStatus.CANCELLED
        order.reject_reason = EndReason.CANCELLED_BY_OPERATOR if by_operator else EndReason.CANCELLED
        order.held_remaining = Decimal(0)
        order.updated_at = timezone.now()
        accounts = _Accounts(
            cursor,
            user_ids={order.user_id},
            assets=[a for a in _assets(market) if a.id == order.held_asset_id],
            fee_shards=set(),
            with_statement=_CANCEL_ORDER,
            with_params=[str(order.reject_reason), order.updated_at, order.id],
        )
        _post_release(
            order_id=order.id, user_id=order.user_id, asset_id=order.held_asset_id, amount=release, accounts=accounts
        )
        book_event_record(market_id=market.id, update_id=market.sequence, order_ids=[order.id], taker_order_id=None)
    return order
