"""A market's order book in memory: the resting orders by side and price level, in price-time priority.

Pure (:mod:`apps.orders.engine`): the sequencer (:mod:`apps.orders.services.sequencer`) loads it
from the database when it starts (and after any rollback), and the batch planner
(:mod:`apps.orders.engine.batch`) changes it as it plans each command. Each price level
is a FIFO queue of :class:`~apps.orders.engine.matching.Maker` values kept in the order they
were added (order id order: ids follow arrival), so :meth:`OrderBook.makers` yields a side best
price first, oldest first within a price, which is what
:func:`~apps.orders.engine.matching.plan_match` walks. Each level also keeps its total resting
quantity, changed as orders are added, refreshed after a fill and removed, so a level's quantity
is read without walking its orders.

Prices are the ``Decimal`` limit prices of resting orders (quote per base); quantities base.
"""

import bisect
from collections import Counter
from collections.abc import Iterable, Iterator
from decimal import Decimal, localcontext

from .matching import EXACT, Maker
from .vocabulary import Side


class _Side:
    """One side of the book: levels by price, their total quantities, and the sorted list of their prices
    (ascending)."""

    def __init__(self, side: str):
        self.side = side
        self.levels: dict[Decimal, dict[int, Maker]] = {}
        self.totals: dict[Decimal, Decimal] = {}  # price -> the counted quantities of its orders
        self.prices: list[Decimal] = []

    def add(self, maker: Maker, qty: Decimal) -> None:
        level = self.levels.get(maker.price)
        if level is None:
            level = self.levels[maker.price] = {}
            self.totals[maker.price] = Decimal(0)
            bisect.insort(self.prices, maker.price)
        level[maker.id] = maker
        self.totals[maker.price] += qty

    def change(self, maker: Maker, delta: Decimal) -> None:
        self.totals[maker.price] += delta

    def remove(self, maker: Maker, qty: Decimal) -> None:
        level = self.levels[maker.price]
        del level[maker.id]
        if level:
            self.totals[maker.price] -= qty
        else:
            del self.levels[maker.price]
            del self.totals[maker.price]
            del self.prices[bisect.bisect_left(self.prices, maker.price)]

    def best_first(self) -> Iterator[Decimal]:
        """Prices best first: highest bid, lowest ask."""
        return reversed(self.prices) if self.side == Side.BUY else iter(self.prices)


class OrderBook:
    """The resting (open or partially filled limit) orders of one market, by id and by price level.

    :meth:`add` puts an order at the back of its price level's queue; :meth:`remove` takes it
    out; a fill changes the :class:`Maker` in place (its ``filled_qty``), and :meth:`refresh`
    then counts the order's quantity again: :meth:`level_qty` reads each level's total as the
    book last counted it (O(1)), so a resting order's fill must be followed by its refresh.
    Raises ``KeyError`` when removing or refreshing an order that is not in the book and
    ``ValueError`` when adding one twice.
    """

    def __init__(self, makers: Iterable[Maker] = ()):
        self.sides = {Side.BUY: _Side(Side.BUY), Side.SELL: _Side(Side.SELL)}
        self.orders: dict[int, Maker] = {}
        self.counted: dict[int, Decimal] = {}  # order id -> its remaining quantity in its level's total
        self.owners: Counter[int] = Counter()  # user id -> resting orders (user_ids without walking the book)
        for maker in sorted(makers, key=lambda m: m.id):
            self.add(maker)

    def __len__(self) -> int:
        return len(self.orders)

    def __contains__(self, order_id: int) -> bool:
        return order_id in self.orders

    def get(self, order_id: int) -> Maker | None:
        """The resting order ``order_id``, or ``None``."""
        return self.orders.get(order_id)

    def add(self, maker: Maker) -> None:
        """Rest ``maker`` at the back of its price level (it must have a price and some quantity left)."""
        if maker.id in self.orders:
            raise ValueError(f"order {maker.id} is already in the book")
        with localcontext(EXACT):
            remaining = maker.remaining
            self.sides[Side(maker.side)].add(maker, remaining)
        self.orders[maker.id] = maker
        self.counted[maker.id] = remaining
        self.owners[maker.user_id] += 1

    def refresh(self, order_id: int) -> None:
        """Count the resting order ``order_id``'s quantity again after a fill changed its :class:`Maker`."""
        maker = self.orders[order_id]
        with localcontext(EXACT):
            remaining = maker.remaining
            self.sides[Side(maker.side)].change(maker, remaining - self.counted[order_id])
        self.counted[order_id] = remaining

    def remove(self, order_id: int) -> Maker:
        """Take the resting order ``order_id`` out of the book and return it."""
        maker = self.orders.pop(order_id)
        self.owners[maker.user_id] -= 1
        if not self.owners[maker.user_id]:
            del self.owners[maker.user_id]
        with localcontext(EXACT):
            self.sides[Side(maker.side)].remove(maker, self.counted.pop(order_id))
        return maker

    def makers(self, side: str, limit_price: Decimal | None = None) -> Iterator[Maker]:
        """The resting orders of ``side``, best price first, oldest first within a price.

        With ``limit_price``, only the prices a taker limited there may meet (asks at or below
        it, bids at or above it). Lazy; the book must not change while it is being walked.
        """
        book_side = self.sides[Side(side)]
        for price in book_side.best_first():
            if limit_price is not None and (price > limit_price if side == Side.SELL else price < limit_price):
                return
            yield from book_side.levels[price].values()

    def level_qty(self, side: str, price: Decimal) -> Decimal:
        """The base quantity resting at ``price`` on ``side`` as last counted (0 when there is no such level)."""
        return self.sides[Side(side)].totals.get(price, Decimal(0))

    def best(self, side: str) -> tuple[Decimal, Decimal] | None:
        """``(price, quantity)`` of the best level of ``side``, or ``None`` when the side is empty."""
        price = next(self.sides[Side(side)].best_first(), None)
        return None if price is None else (price, self.level_qty(side, price))

    def user_ids(self) -> set[int]:
        """The owners of the resting orders."""
        return set(self.owners)
