"""Writing orders and trades: the order row, its cancel, the resting orders' fills and the trades.

Statements come from the models (:mod:`apps.orders.store.sql`); values are the model
instances' or the engine's named values.
"""

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime

from django.db import connection

from ..engine.batch import OrderState, PlacedOrder, TradeRow
from ..engine.settlement import MakerUpdate, Settlement
from ..models import Order, OrderStatus, Trade
from .sql import attnames, column_names, columns_of, insert_sql, rows_json, update_sql

ORDER_FIELDS = attnames(Order)
INSERT_ORDERS = insert_sql(Order, ORDER_FIELDS)
"""INSERT orders: one JSON parameter of their rows, every column of :data:`ORDER_FIELDS` (:func:`order_params`,
:func:`placed_order_params`)."""
_ORDER_COLUMNS = column_names(Order, ORDER_FIELDS)

ORDER_BY_ID = f"SELECT {', '.join(ORDER_FIELDS)} FROM {Order._meta.db_table} WHERE id = %s"

CANCEL_ORDER = f"""
    UPDATE {Order._meta.db_table} SET status = '{OrderStatus.CANCELLED}', reject_reason = %s, held_remaining = 0,
        updated_at = %s
    WHERE id = %s
"""
"""Cancel one order (its end reason, the time, its id); the caller releases what it held."""

_MAKER_FIELDS = ["id", "filled_qty", "filled_quote_qty", "fee_total", "held_remaining", "status", "reject_reason"]
UPDATE_MAKERS = update_sql(Order, _MAKER_FIELDS, constant=["updated_at"])
"""UPDATE resting orders' fills, holds and states: the time, then one array per field of ``_MAKER_FIELDS``."""

TRADE_FIELDS = attnames(Trade)
INSERT_TRADES = insert_sql(Trade, TRADE_FIELDS)
"""INSERT trades: one JSON parameter of their rows, every column of :data:`TRADE_FIELDS`."""
_TRADE_COLUMNS = column_names(Trade, TRADE_FIELDS)


def order_params(orders: Sequence[Order]) -> list:
    """The parameters of :data:`INSERT_ORDERS` for ``orders``."""
    return [rows_json(_ORDER_COLUMNS, ([getattr(order, name) for name in ORDER_FIELDS] for order in orders))]


def placed_order_params(orders: Iterable[PlacedOrder], *, market_id: int, created_at: datetime) -> list:
    """The parameters of :data:`INSERT_ORDERS` for a batch's new orders, created (and last updated) at ``created_at``."""
    at = created_at.isoformat()  # once for the batch, not once per row (rows_json would)
    fixed = {"market_id": market_id, "created_at": at, "updated_at": at}
    return [rows_json(_ORDER_COLUMNS, _rows(orders, fixed, ORDER_FIELDS))]


def order_from_row(row: tuple) -> Order:
    """An :class:`Order` from an :data:`ORDER_BY_ID` row."""
    return Order.from_db(connection.alias, ORDER_FIELDS, row)


_FIELDS_BY_ATTNAME = {field.attname: field for field in Order._meta.concrete_fields}


def order_from_json(row: dict) -> Order:
    """An :class:`Order` from its row as PostgreSQL's ``to_jsonb`` writes it (keys: column names), decoded with
    ``json.loads(..., parse_float=Decimal)``: the same values a read of the row gives (amounts as ``Decimal`` with
    the column's scale, times as aware datetimes). Raises ``KeyError`` for a missing column."""
    values = [_FIELDS_BY_ATTNAME[name].to_python(row[name]) for name in ORDER_FIELDS]
    return Order.from_db(connection.alias, ORDER_FIELDS, values)


def maker_update_params(updated_at: datetime, updates: Sequence[MakerUpdate]) -> list:
    """The parameters of :data:`UPDATE_MAKERS`: the resting orders' new fill totals, holds and states."""
    return [
        updated_at,
        *columns_of(
            (
                (u.maker.id, u.maker.filled_qty, u.maker.filled_quote_qty, u.maker.fee_total, u.maker.held_remaining)
                + (u.status, u.reason)
                for u in updates
            ),
            len(_MAKER_FIELDS),
        ),
    ]


def trade_params(
    *, market_id: int, taker: Order, taker_rate, settlements: Sequence[Settlement], created_at: datetime
) -> list:
    """The parameters of :data:`INSERT_TRADES` for the taker's settled fills (entry ids set)."""
    rows = []
    for s in settlements:
        values = {
            "id": s.trade_id,
            "market_id": market_id,
            "taker_order_id": taker.id,
            "maker_order_id": s.fill.maker.id,
            "seq": s.seq,
            "taker_user_id": taker.user_id,
            "maker_user_id": s.fill.maker.user_id,
            "taker_side": taker.side,
            "price": s.fill.price,
            "qty": s.fill.qty,
            "quote_qty": s.fill.quote_qty,
            "taker_fee": s.taker_fee,
            "maker_fee": s.maker_fee,
            "taker_fee_rate": taker_rate,
            "maker_fee_rate": s.fill.maker.fee_rate,
            "entry_id": s.entry_id,
            "created_at": created_at,
        }
        rows.append([values[name] for name in TRADE_FIELDS])
    return [rows_json(_TRADE_COLUMNS, rows)]


def order_state_params(updated_at: datetime, states: dict[int, OrderState]) -> list:
    """The parameters of :data:`UPDATE_MAKERS` for orders' new states by id (a sequencer batch's end states)."""
    return [
        updated_at,
        *columns_of(
            (
                (order_id, s.filled_qty, s.filled_quote_qty, s.fee_total, s.held_remaining, s.status, s.reject_reason)
                for order_id, s in states.items()
            ),
            len(_MAKER_FIELDS),
        ),
    ]


def trade_row_params(*, market_id: int, trades: Sequence[TradeRow], created_at: datetime) -> list:
    """The parameters of :data:`INSERT_TRADES` for a batch's trades (entry ids set)."""
    fixed = {"market_id": market_id, "created_at": created_at.isoformat()}
    return [rows_json(_TRADE_COLUMNS, _rows(trades, fixed, TRADE_FIELDS))]


def _rows(values: Iterable[object], fixed: dict, names: Sequence[str]) -> Iterator[list]:
    """Each of ``values`` (a dataclass instance) as the list of its ``names``, ``fixed`` standing in for (or adding
    to) its attributes."""
    for value in values:
        row = vars(value) | fixed  # once per row, not once per name
        yield [row[name] for name in names]
