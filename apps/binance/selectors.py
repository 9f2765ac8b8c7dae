"""Reads the Binance surface needs beyond apps.orders' selectors: trades by integer id, aggregates, time ranges.

Binance's trade ids are integers rising with time per symbol. Ours are ``<taker order id>-<fill
number>``; :func:`trade_number` writes one as the integer ``taker_order_id * 10**6 + seq``. Order
ids are drawn under the market's row lock, so these numbers rise in matching order on each
market, and ``fromId`` reads are one index range (``trade_market_recent``). A fill number stays
below 10**6: one placement would otherwise have to meet a million resting orders in one
transaction. Amounts are ``Decimal``; times aware UTC datetimes.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from django.db import connection
from django.db.models import Q, QuerySet, Sum

from apps.orders.models import TRADE_NUMBER_BASE as FILLS_PER_ORDER
from apps.orders.models import Market, Order, Trade

AVG_PRICE_WINDOW = timedelta(minutes=5)


def trade_number(trade: Trade) -> int:
    """The Binance integer id of ``trade`` (see the module's docstring)."""
    return trade.number


def _from_number(number: int) -> Q:
    """Trades whose number is at least ``number``."""
    order_id, seq = divmod(number, FILLS_PER_ORDER)
    return Q(taker_order_id__gt=order_id) | Q(taker_order_id=order_id, seq__gte=seq)


# A time is shown in whole milliseconds rounded half up (``shapes.ms``), so the one shown as ``t`` covers the
# stored times in ``[t - 0.5 ms, t + 0.5 ms)``: ``startTime`` and ``endTime`` (inclusive, as Binance's) bound what
# the answers show, and consecutive windows ``[a, b - 1]``, ``[b, c]`` neither miss nor repeat a row.
HALF_MILLISECOND = timedelta(microseconds=500)


def _in_time(rows: QuerySet, field: str, start: datetime | None, end: datetime | None) -> QuerySet:
    if start is not None:
        rows = rows.filter(**{f"{field}__gte": start - HALF_MILLISECOND})
    if end is not None:
        rows = rows.filter(**{f"{field}__lt": end + HALF_MILLISECOND})
    return rows


def market_trades(*, market: Market, limit: int, from_number: int | None = None) -> list[Trade]:
    """The market's trades in id order: from ``from_number`` on, else the last ``limit``."""
    rows = Trade.objects.filter(market_id=market.id)
    if from_number is not None:
        return list(rows.filter(_from_number(from_number)).order_by("taker_order_id", "seq")[:limit])
    return list(reversed(rows.order_by("-taker_order_id", "-seq")[:limit]))


@dataclass(frozen=True)
class AggTrade:
    """Fills of one taker order at one price, summed (Binance's ``aggTrades``): ``qty`` base, at ``price`` quote."""

    first: int
    last: int
    price: Decimal
    qty: Decimal
    time: datetime
    buyer_is_maker: bool


_AGG_TRADES = """
    SELECT min(seq), max(seq), taker_order_id, price, sum(qty), min(created_at), min(taker_side)
    FROM orders_trade
    WHERE market_id = %s {where}
    GROUP BY taker_order_id, price
    ORDER BY taker_order_id {direction}, min(seq) {direction}
    LIMIT %s
"""


def agg_trades(
    *,
    market: Market,
    limit: int,
    from_number: int | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[AggTrade]:
    """Aggregate trades in id order: from ``from_number``, or within ``[start, end]``, else the last ``limit``.

    One taker order's fills at one price are consecutive (the book is walked by price), so
    grouping by (taker order, price) is Binance's aggregation.
    """
    where: list[str] = []
    params: list[int | datetime] = [market.id]
    direction = "ASC"
    if from_number is not None:
        order_id, seq = divmod(from_number, FILLS_PER_ORDER)
        where.append("AND (taker_order_id > %s OR (taker_order_id = %s AND seq >= %s))")
        params += [order_id, order_id, seq]
    if start is not None:
        where.append("AND created_at >= %s")
        params.append(start - HALF_MILLISECOND)
    if end is not None:
        where.append("AND created_at < %s")
        params.append(end + HALF_MILLISECOND)
    if from_number is None and start is None:
        direction = "DESC"
    with connection.cursor() as cursor:
        cursor.execute(_AGG_TRADES.format(where=" ".join(where), direction=direction), params + [limit])
        rows = cursor.fetchall()
    if direction == "DESC":
        rows.reverse()
    return [
        AggTrade(
            first=order_id * FILLS_PER_ORDER + first,
            last=order_id * FILLS_PER_ORDER + last,
            price=price,
            qty=qty,
            time=at,
            buyer_is_maker=taker_side == "sell",
        )
        for first, last, order_id, price, qty, at, taker_side in rows
    ]


def user_trades(
    *,
    user_id: int,
    market: Market,
    limit: int,
    order_id: int | None = None,
    from_number: int | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[Trade]:
    """The user's trades (as maker or taker) on ``market`` in id order; the last ``limit`` unless a start is given."""
    rows = Trade.objects.filter(Q(taker_user_id=user_id) | Q(maker_user_id=user_id), market_id=market.id)
    if order_id is not None:  # the user's own order on either side of the trade, never the counterparty's
        rows = rows.filter(
            Q(taker_order_id=order_id, taker_user_id=user_id) | Q(maker_order_id=order_id, maker_user_id=user_id)
        )
    rows = _in_time(rows, "created_at", start, end)
    if from_number is not None:
        return list(rows.filter(_from_number(from_number)).order_by("taker_order_id", "seq")[:limit])
    if start is not None:
        return list(rows.order_by("taker_order_id", "seq")[:limit])
    return list(reversed(rows.order_by("-taker_order_id", "-seq")[:limit]))


def user_orders(
    *,
    user_id: int,
    market: Market,
    limit: int,
    from_order_id: int | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[Order]:
    """The user's orders on ``market``, oldest first: from ``from_order_id`` on, else the last ``limit``."""
    rows = _in_time(Order.objects.filter(user_id=user_id, market_id=market.id), "created_at", start, end)
    if from_order_id is not None:
        return list(rows.filter(id__gte=from_order_id).order_by("id")[:limit])
    if start is not None:
        return list(rows.order_by("id")[:limit])
    return list(reversed(rows.order_by("-id")[:limit]))


def order_by_client_id(*, user_id: int, client_order_id: str) -> Order | None:
    """The user's order with ``client_order_id`` (unique per user), or None."""
    return Order.objects.filter(user_id=user_id, client_order_id=client_order_id).first()


def taker_fills(*, order_id: int) -> list[Trade]:
    """The fills an order made as the taker, in matching order (Binance's ``fills`` of a FULL response)."""
    return list(Trade.objects.filter(taker_order_id=order_id).order_by("seq"))


def average_price(*, market: Market, now: datetime) -> Decimal | None:
    """Binance's ``avgPrice``: quote volume over base volume of the last five minutes' trades, at the quote
    precision (half-even); the last trade's price when none traded then; None when the market never traded."""
    window = Trade.objects.filter(market_id=market.id, created_at__gt=now - AVG_PRICE_WINDOW, created_at__lte=now)
    sums = window.aggregate(qty=Sum("qty"), quote=Sum("quote_qty"))
    if sums["qty"]:
        return (sums["quote"] / sums["qty"]).quantize(market.quote.quantum, rounding=ROUND_HALF_EVEN)
    last = Trade.objects.filter(market_id=market.id).order_by("-taker_order_id", "-seq").first()
    return None if last is None else last.price


def last_trade(*, market: Market) -> Trade | None:
    """The market's last trade (``/api/v3/ticker/price``)."""
    return Trade.objects.filter(market_id=market.id).order_by("-taker_order_id", "-seq").first()
