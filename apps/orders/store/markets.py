"""The market row lock of a placement or cancel, read into named values.

The lock is ``UPDATE orders_market SET sequence = sequence + 1 ... RETURNING``: the same
``FOR NO KEY UPDATE`` row lock as ``select_for_update(no_key=True)``, held to commit; it
bumps the book's sequence and (for a placement) draws the new order's id once the lock
is held, so ids (time priority) follow the order in which placements hold the lock.
"""

from dataclasses import dataclass, fields
from decimal import Decimal

from apps.core.errors import NotFound
from apps.ledger.models import Asset

from ..models import Market, Order


@dataclass(frozen=True)
class MarketShape:
    """What never changes about a market (database triggers keep it so): ids, tick, step, precisions.

    Kept per process by symbol (:data:`apps.orders.services.placement.SHAPES`) so an order can be
    parsed before the market lock is taken, and the lock and the first book page sent together;
    every placement compares it with the locked row and starts over with the row when they differ.
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


def market_shape(market: Market) -> MarketShape:
    """The :class:`MarketShape` of a market row (with its base and quote assets: ``select_related`` them)."""
    return MarketShape(
        id=market.id,
        symbol=market.symbol,
        base_id=market.base_id,
        quote_id=market.quote_id,
        tick_size=market.tick_size,
        step_size=market.step_size,
        base_code=market.base.code,
        base_decimals=market.base.decimals,
        quote_code=market.quote.code,
        quote_decimals=market.quote.decimals,
    )


@dataclass(frozen=True)
class LockedMarket:
    """The market row as read under its lock, with its assets' codes and precisions (``sequence`` as bumped)."""

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
    market_order_price_band: Decimal | None
    base_code: str
    base_decimals: int
    quote_code: str
    quote_decimals: int

    @property
    def shape(self) -> MarketShape:
        """The unchanging part of the row."""
        return MarketShape(**{f.name: getattr(self, f.name) for f in fields(MarketShape)})

    @property
    def assets(self) -> list[Asset]:
        """The base and quote as (unsaved, partial) :class:`Asset` instances: id, code and decimals."""
        return [
            Asset(id=self.base_id, code=self.base_code, decimals=self.base_decimals),
            Asset(id=self.quote_id, code=self.quote_code, decimals=self.quote_decimals),
        ]


_ASSET_COLUMNS = {
    "base_code": "b.code",
    "base_decimals": "b.decimals",
    "quote_code": "q.code",
    "quote_decimals": "q.decimals",
}
_MARKET_SELECT = ", ".join(
    _ASSET_COLUMNS.get(f.name) or f"m.{next(c.column for c in Market._meta.concrete_fields if c.attname == f.name)}"
    for f in fields(LockedMarket)
)
MARKET_COLUMNS = _MARKET_SELECT
"""The SELECT list of a :class:`LockedMarket` (``m`` the market, ``b``/``q`` its base and quote assets)."""
_ORDER_ID = f"nextval(pg_get_serial_sequence('{Order._meta.db_table}', '{Order._meta.pk.column}'))"
_MARKET = Market._meta.db_table

LOCK_MARKET_FOR_ORDER = f"""
    UPDATE {_MARKET} m SET sequence = m.sequence + 1
    FROM ledger_asset b, ledger_asset q
    WHERE m.symbol = %s AND b.id = m.base_id AND q.id = m.quote_id
    RETURNING {_MARKET_SELECT}, {_ORDER_ID}
"""
"""Lock the market named by symbol; returns the row and the new order's id."""

LOCK_MARKET_OF_ORDER = f"""
    UPDATE {_MARKET} m SET sequence = m.sequence + 1
    FROM ledger_asset b, ledger_asset q
    WHERE m.id = (SELECT market_id FROM {Order._meta.db_table} WHERE id = %s) AND b.id = m.base_id AND q.id = m.quote_id
    RETURNING {_MARKET_SELECT}
"""
"""Lock the market of an order id; returns the row (none for an unknown order)."""

_WIDTH = len(fields(LockedMarket))


def locked_market_row(row: tuple | None, symbol: str) -> tuple[LockedMarket, int]:
    """``(market, new order id)`` from a :data:`LOCK_MARKET_FOR_ORDER` row; :class:`NotFound` for none."""
    if row is None:
        raise NotFound(f"No market {symbol}.", fields={"market": "No such market."})
    return LockedMarket(*row[:_WIDTH]), row[_WIDTH]


def lock_market_for_order(cursor, symbol: str) -> tuple[LockedMarket, int]:
    """Lock the market row (FOR NO KEY UPDATE, held to commit), bump its book sequence, draw an order id."""
    cursor.execute(LOCK_MARKET_FOR_ORDER, [symbol])
    return locked_market_row(cursor.fetchone(), symbol)


def locked_market_of_order(row: tuple) -> LockedMarket:
    """The market from a :data:`LOCK_MARKET_OF_ORDER` row."""
    return LockedMarket(*row)
