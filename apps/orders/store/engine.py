"""The sequencer's batch SQL: the market lock and order ids of a batch, the book to rebuild, what the planner
reads (fee rates, frozen accounts, stored orders a replay or cancel names) and the sequence bump.

Rows come back as the engine's named values (:class:`~apps.orders.engine.matching.Maker`,
:class:`~apps.orders.engine.batch.Existing`, :class:`~apps.orders.engine.batch.Rates`,
:class:`OrderStatic`), never by position outside this module.
"""

from dataclasses import dataclass, fields
from datetime import datetime
from decimal import Decimal

from apps.accounts.models import AccountRestriction

from ..engine.batch import Existing, Rates
from ..engine.matching import Maker
from ..models import OPEN_STATUSES, FeeSchedule, Market, Order, UserFeeTier
from .markets import MARKET_COLUMNS, LockedMarket

_ORDER, _MARKET = Order._meta.db_table, Market._meta.db_table
_OPEN = ", ".join(f"'{status}'" for status in OPEN_STATUSES)

LOCK_MARKET_FOR_BATCH = f"""
    WITH m AS (SELECT * FROM {_MARKET} WHERE id = %s FOR NO KEY UPDATE)
    SELECT {MARKET_COLUMNS},
           ARRAY(SELECT nextval(pg_get_serial_sequence('{_ORDER}', 'id')) FROM generate_series(1, %s))
    FROM m JOIN ledger_asset b ON b.id = m.base_id JOIN ledger_asset q ON q.id = m.quote_id
"""
"""Lock the market row (held to commit; only that row: the assets are read) and draw order ids: the row as :class:`LockedMarket` (its sequence as the
last writer left it) and an array of new order ids (as many as asked)."""

BUMP_SEQUENCE = f"UPDATE {_MARKET} SET sequence = sequence + %s WHERE id = %s"
"""Advance the market's sequence by the batch's changes (one per placement, replay and cancel applied)."""


@dataclass(frozen=True)
class OrderStatic:
    """What never changes about an order, as the book's stream events publish it."""

    user_id: int
    client_order_id: str
    side: str
    type: str
    time_in_force: str
    price: Decimal | None
    qty: Decimal | None
    quote_qty: Decimal | None
    post_only: bool
    stp: str
    created_at: datetime


_MAKER_COLUMNS = [f.name for f in fields(Maker) if f.name != "fee_rate"]
_STATIC_COLUMNS = [f.name for f in fields(OrderStatic)]
OPEN_ORDERS = f"""
    SELECT {", ".join(_MAKER_COLUMNS)}, {", ".join(_STATIC_COLUMNS)} FROM {_ORDER}
    WHERE market_id = %s AND status IN ({_OPEN}) ORDER BY id
"""


def open_orders(cursor, market_id: int) -> list[tuple[Maker, OrderStatic]]:
    """The market's resting orders in id order, each as a :class:`Maker` (rate 0: the planner reads the
    rate in force when it meets one) and its :class:`OrderStatic`."""
    cursor.execute(OPEN_ORDERS, [market_id])
    width = len(_MAKER_COLUMNS)
    return [
        (Maker(**dict(zip(_MAKER_COLUMNS, row[:width], strict=True)), fee_rate=Decimal(0)), OrderStatic(*row[width:]))
        for row in cursor.fetchall()
    ]


RATES = f"""
    SELECT NULL::bigint, maker_rate, taker_rate FROM {FeeSchedule._meta.db_table} WHERE is_default
    UNION ALL
    SELECT t.user_id, s.maker_rate, s.taker_rate
    FROM {UserFeeTier._meta.db_table} t JOIN {FeeSchedule._meta.db_table} s ON s.id = t.schedule_id
    WHERE t.user_id = ANY(%s::bigint[])
"""
"""The fee rates in force for the users (an array), in one statement: ``(NULL, maker rate, taker rate)`` of the
default schedule (no such row without one), and ``(user id, maker rate, taker rate)`` of those with a tier
(:func:`rates_of`)."""


def rates_of(rows: list[tuple]) -> Rates:
    """The :class:`Rates` of :data:`RATES` rows."""
    default = next(((maker, taker) for user_id, maker, taker in rows if user_id is None), None)
    return Rates(
        default=default,
        tiers={user_id: (maker, taker) for user_id, maker, taker in rows if user_id is not None},
    )


FROZEN_USERS = f"""
    SELECT user_id FROM {AccountRestriction._meta.db_table} WHERE user_id = ANY(%s::bigint[]) AND trading_frozen
"""

_EXISTING = ", ".join(f"o.{f.name}" for f in fields(Existing))

ORDERS_BY_CLIENT_ID = f"""
    SELECT o.client_order_id, {_EXISTING} FROM {_ORDER} o
    JOIN unnest(%s::bigint[], %s::text[]) AS k(user_id, client_order_id)
      ON o.user_id = k.user_id AND o.client_order_id = k.client_order_id
"""
"""The stored orders of ``(user id, client_order_id)`` pairs (two arrays): the client id, then an
:class:`Existing`."""

ORDERS_BY_ID = f"SELECT {_EXISTING} FROM {_ORDER} o WHERE o.id = ANY(%s::bigint[])"
"""The stored orders of the ids (an array) as :class:`Existing`."""


def locked_market_for_batch(row: tuple) -> tuple[LockedMarket, list[int]]:
    """``(market, new order ids)`` from a :data:`LOCK_MARKET_FOR_BATCH` row."""
    width = len(fields(LockedMarket))
    return LockedMarket(*row[:width]), list(row[width])
