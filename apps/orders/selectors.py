"""Reads of the orders app: the book by price level, recent trades, a user's orders and fills.

Amounts are ``Decimal`` (prices in quote per base, quantities in base, values in quote);
format them with the asset's precision (:func:`apps.ledger.amounts.format_amount`).
"""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import connection
from django.db.models import Q, QuerySet

from apps.core.errors import DomainError, NotFound

from .errors import NoFeeSchedule
from .models import (
    ENDED_STATUSES,
    OPEN_STATUSES,
    PENDING_CLIENT_ORDER_ID,
    Command,
    CommandKind,
    CommandStatus,
    FeeSchedule,
    Market,
    Order,
    Side,
    Trade,
)

MAX_LIMIT = 1000


def _limit(limit: int) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        message = f"Must be a whole number from 1 to {MAX_LIMIT}."
        raise DomainError(message, fields={"limit": message})
    return limit


def market_list() -> list[Market]:
    """Every market with its base and quote assets, by symbol."""
    return list(Market.objects.select_related("base", "quote").order_by("symbol"))


def market_of_order(order: Order) -> Market:
    """The market of ``order`` with its base and quote assets (one query by primary key)."""
    return Market.objects.select_related("base", "quote").get(id=order.market_id)


def market_get(*, symbol: str) -> Market:
    """The market with ``symbol`` (``BTC-USDT``) and its assets. Raises :class:`NotFound`, also for a
    ``symbol`` no market can have (not text, too long, NUL or other unprintable characters)."""
    max_length = Market._meta.get_field("symbol").max_length or 0  # a CharField: always set
    if not isinstance(symbol, str) or not 0 < len(symbol) <= max_length or not symbol.isprintable():
        raise NotFound("No such market.", fields={"market": "No such market."})
    market = Market.objects.select_related("base", "quote").filter(symbol=symbol).first()
    if market is None:
        raise NotFound(f"No market {symbol}.", fields={"market": "No such market."})
    return market


@dataclass(frozen=True)
class Depth:
    """The book aggregated by price: ``bids`` best (highest) first, ``asks`` best (lowest) first.

    Each level is ``(price, qty)``: quote per base, and the base quantity resting at that
    price. ``sequence`` is the market's book sequence the snapshot was taken at.
    """

    bids: list[tuple[Decimal, Decimal]]
    asks: list[tuple[Decimal, Decimal]]
    sequence: int


_DEPTH = """
    WITH m AS (SELECT id, sequence FROM orders_market WHERE symbol = %s)
    (SELECT 'buy' AS side, price, sum(qty - filled_qty) AS qty, NULL::bigint AS sequence
     FROM orders_order WHERE market_id = (SELECT id FROM m) AND side = 'buy' AND status IN ('open', 'partially_filled')
     GROUP BY price ORDER BY price DESC LIMIT %s)
    UNION ALL
    (SELECT 'sell', price, sum(qty - filled_qty), NULL
     FROM orders_order WHERE market_id = (SELECT id FROM m) AND side = 'sell' AND status IN ('open', 'partially_filled')
     GROUP BY price ORDER BY price LIMIT %s)
    UNION ALL
    SELECT 'sequence', NULL, NULL, sequence FROM m
"""


def order_book_depth(*, market: str, limit: int = 50) -> Depth:
    """The best ``limit`` price levels on each side of ``market`` (symbol), read in one statement.

    Raises :class:`NotFound` for an unknown market, :class:`DomainError` (field ``limit``)
    for a limit outside 1..1000.
    """
    limit = _limit(limit)
    with connection.cursor() as cursor:
        cursor.execute(_DEPTH, [market, limit, limit])
        rows = cursor.fetchall()
    sequence = next((row[3] for row in rows if row[0] == "sequence"), None)
    if sequence is None:
        raise NotFound(f"No market {market}.", fields={"market": "No such market."})
    return Depth(
        bids=[(price, qty) for side, price, qty, _ in rows if side == Side.BUY],
        asks=[(price, qty) for side, price, qty, _ in rows if side == Side.SELL],
        sequence=sequence,
    )


def _time_window(trades: QuerySet[Trade], start: datetime | None, end: datetime | None) -> QuerySet[Trade]:
    if start is not None:
        trades = trades.filter(created_at__gte=start)
    if end is not None:
        trades = trades.filter(created_at__lt=end)
    return trades


def recent_trades(
    *,
    market: str,
    limit: int = 50,
    before: tuple[int, int] | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[Trade]:
    """The market's last ``limit`` trades, newest first (``taker_side`` is the API's ``side``).

    ``before``: only trades older than the ``(taker order id, fill number)`` key (the order of the
    list, which follows the market lock); ``start`` (inclusive) and ``end`` (exclusive) bound the
    trades' time. Raises :class:`NotFound`, :class:`DomainError` (``limit``).
    """
    limit = _limit(limit)
    market_id = Market.objects.filter(symbol=market).values_list("id", flat=True).first()
    if market_id is None:
        raise NotFound(f"No market {market}.", fields={"market": "No such market."})
    trades = _time_window(Trade.objects.filter(market_id=market_id), start, end)
    if before is not None:
        order_id, seq = before
        trades = trades.filter(Q(taker_order_id__lt=order_id) | Q(taker_order_id=order_id, seq__lt=seq))
    return list(trades.order_by("-taker_order_id", "-seq")[:limit])


def orders_for_user(
    *, user_id: int, market: str | None = None, status: str | None = None, client_order_id: str | None = None
) -> QuerySet[Order]:
    """The user's orders, newest first; ``status`` ``"open"`` (resting) or ``"closed"`` (ended), ``market`` a symbol,
    ``client_order_id`` the caller's own id (unique per user: at most one order).

    Raises :class:`DomainError` (field ``status``) for another status filter.
    """
    orders = Order.objects.filter(user_id=user_id).select_related("market")
    if client_order_id is not None:
        orders = orders.filter(client_order_id=client_order_id)
    if market is not None:
        orders = orders.filter(market__symbol=market)
    if status == "open":
        orders = orders.filter(status__in=OPEN_STATUSES)
    elif status == "closed":
        orders = orders.filter(status__in=ENDED_STATUSES)
    elif status is not None:
        raise DomainError("Must be open or closed.", fields={"status": "Must be open or closed."})
    return orders.order_by("-id")


def order_for_user(*, user_id: int, order_id: int) -> Order:
    """One of the user's orders. Raises :class:`NotFound` (also for another user's order)."""
    order = Order.objects.select_related("market").filter(id=order_id, user_id=user_id).first()
    if order is None:
        raise NotFound(f"No order {order_id}.", fields={"order": "No such order."})
    return order


@dataclass(frozen=True)
class UserFill:
    """One trade from one participant's side (API ``GET /trades/``).

    ``price`` quote per base, ``qty`` base, ``quote_qty`` quote; ``fee`` in ``fee_asset``
    (base when the user bought, quote when they sold) at ``fee_rate``; ``liquidity`` is
    ``maker`` or ``taker``.
    """

    id: str
    order_id: int
    market: str
    side: str
    price: Decimal
    qty: Decimal
    quote_qty: Decimal
    fee: Decimal
    fee_asset: str
    fee_rate: Decimal
    liquidity: str
    time: datetime
    taker_order_id: int
    seq: int

    @property
    def key(self) -> tuple[datetime, int, int]:
        """The fill's place in the list (``fills_for_user``'s ``before``): time, taker order id, fill number."""
        return self.time, self.taker_order_id, self.seq


def fills_for_user(
    *,
    user_id: int,
    market: str | None = None,
    limit: int = 100,
    before: tuple[datetime, int, int] | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[UserFill]:
    """The user's last ``limit`` fills, as maker or taker, newest first.

    ``before``: only fills after the :attr:`UserFill.key` ``(time, taker order id, fill number)``
    in the list's order; ``start`` (inclusive) and ``end`` (exclusive) bound their time.
    Raises :class:`DomainError` (``limit``).
    """
    limit = _limit(limit)
    trades = _time_window(_user_trades(user_id, market), start, end)
    if before is not None:
        time, order_id, seq = before
        trades = trades.filter(
            Q(created_at__lt=time)
            | Q(created_at=time, taker_order_id__lt=order_id)
            | Q(created_at=time, taker_order_id=order_id, seq__lt=seq)
        )
    return [_user_fill(trade, user_id) for trade in trades[:limit]]


def fills_for_user_between(
    *, user_id: int, start: datetime | None = None, end: datetime | None = None
) -> Iterator[UserFill]:
    """Every fill of the user with ``start <= time < end`` (either bound optional), newest first, read in chunks.

    For exports: no limit, so iterate it rather than keep it.
    """
    trades = _time_window(_user_trades(user_id, None), start, end)
    return (_user_fill(trade, user_id) for trade in trades.iterator(chunk_size=1000))


def _user_trades(user_id: int, market: str | None) -> QuerySet[Trade]:
    """The user's trades (as maker or taker), newest first (time, taker order id, fill number)."""
    trades = Trade.objects.filter(Q(taker_user_id=user_id) | Q(maker_user_id=user_id)).select_related(
        "market__base", "market__quote"
    )
    if market is not None:
        trades = trades.filter(market__symbol=market)
    return trades.order_by("-created_at", "-taker_order_id", "-seq")


def _user_fill(trade: Trade, user_id: int) -> UserFill:
    """``trade`` seen from ``user_id``'s side (taker or maker)."""
    taker = trade.taker_user_id == user_id
    side = trade.taker_side if taker else (Side.SELL if trade.taker_side == Side.BUY else Side.BUY)
    return UserFill(
        id=trade.id,
        order_id=trade.taker_order_id if taker else trade.maker_order_id,
        market=trade.market.symbol,
        side=side,
        price=trade.price,
        qty=trade.qty,
        quote_qty=trade.quote_qty,
        fee=trade.taker_fee if taker else trade.maker_fee,
        fee_asset=trade.market.base.code if side == Side.BUY else trade.market.quote.code,
        fee_rate=trade.taker_fee_rate if taker else trade.maker_fee_rate,
        liquidity="taker" if taker else "maker",
        time=trade.created_at,
        taker_order_id=trade.taker_order_id,
        seq=trade.seq,
    )


def fee_rates_for_user(*, user_id: int) -> tuple[Decimal, Decimal]:
    """``(maker rate, taker rate)`` the user pays now: their tier's, else the default schedule's.

    Raises :class:`NoFeeSchedule` when neither exists.
    """
    schedule = (
        FeeSchedule.objects.filter(tiers__user_id=user_id).first()
        or FeeSchedule.objects.filter(is_default=True).first()
    )
    if schedule is None:
        raise NoFeeSchedule("Trading is paused: no default fee schedule is set.")
    return schedule.maker_rate, schedule.taker_rate


def placement_pending(*, user_id: int, client_order_id: str) -> bool:
    """Whether a placement of the user's with ``client_order_id`` is queued for its market's sequencer and not
    applied yet: the order may still be placed, so a query for it must not answer "no such order" (break-it
    review: a bot told so after a 504 placed the order again under a new id, and the first went live too).

    Read it before the order, or after a miss and then the order again: a command applied in between is then
    found as its order."""
    return (
        Command.objects.annotate(client_order_id=PENDING_CLIENT_ORDER_ID)
        .filter(user_id=user_id, kind=CommandKind.PLACE, status=CommandStatus.PENDING, client_order_id=client_order_id)
        .exists()
    )
