"""Reading one side of a market's book under the market lock, best first, page by page.

Each row is a :class:`~apps.orders.engine.matching.Maker` (the SELECT list is generated
from its fields) with its owner's maker fee rate and the taker's rate (tier, else the
default schedule; NULL when there is no default schedule).
"""

from collections.abc import Iterator
from dataclasses import fields
from decimal import Decimal

from ..engine.matching import Maker
from ..errors import NoFeeSchedule
from ..models import OPEN_STATUSES, FeeSchedule, Order, Side, UserFeeTier

# Resting orders read per query while matching; a taker rarely needs more.
BOOK_PAGE = 32

_ORDER, _TIER, _SCHEDULE = Order._meta.db_table, UserFeeTier._meta.db_table, FeeSchedule._meta.db_table
_MAKER_SELECT = ", ".join(
    "COALESCE(s.maker_rate, d.maker_rate)" if f.name == "fee_rate" else f"o.{f.name}" for f in fields(Maker)
)
_OPEN = ", ".join(f"'{status}'" for status in OPEN_STATUSES)
_RATES = f"""
        LEFT JOIN {_TIER} t ON t.user_id = o.user_id
        LEFT JOIN {_SCHEDULE} s ON s.id = t.schedule_id
        LEFT JOIN {_SCHEDULE} d ON d.is_default
"""
_TAKER_RATE = f"""(
        SELECT COALESCE(ts.taker_rate, td.taker_rate)
        FROM (SELECT taker_rate FROM {_SCHEDULE} WHERE is_default) td
        LEFT JOIN {_TIER} tt ON tt.user_id = %s
        LEFT JOIN {_SCHEDULE} ts ON ts.id = tt.schedule_id
    )"""


def _book_page_sql(side: str, *, limited: bool, after: bool) -> str:
    """Resting orders of ``side`` in price-time priority, optionally within a limit price and after the
    (price, id) key of the previous page.

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
        SELECT {_MAKER_SELECT}, {_TAKER_RATE}
        FROM {_ORDER} o {_RATES}
        WHERE o.market_id = %s AND o.side = '{side}' AND o.status IN ({_OPEN})
              {"".join(" AND " + condition for condition in conditions)}
        ORDER BY o.price{"" if asks else " DESC"}, o.id
        LIMIT %s
    """


_BOOK_PAGE_SQL: dict[tuple[str, bool, bool], str] = {
    (side, limited, after): _book_page_sql(side, limited=limited, after=after)
    for side in (Side.SELL, Side.BUY)
    for limited in (False, True)
    for after in (False, True)
}


class Book:
    """The resting orders a taker may match, best first, read page by page under the market lock.

    Iterating yields :class:`Maker` rows of ``side`` crossing ``limit_price`` (all when
    ``None``); ``taker_rate`` is the taker's fee rate, read with the first page.
    ``first_page`` is the rows of :meth:`page_query` already fetched (pipelined with the lock).
    Raises :class:`NoFeeSchedule` when a rate is missing (no default schedule).
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
            maker = None
            for *maker_values, taker_rate in rows:
                maker = Maker(*maker_values)
                if maker.fee_rate is None or taker_rate is None:
                    raise NoFeeSchedule("Trading is paused: no default fee schedule is set.")
                self.taker_rate = taker_rate
                yield maker
            if len(rows) < self.page or maker is None:
                return
            after = (maker.price, maker.id)
