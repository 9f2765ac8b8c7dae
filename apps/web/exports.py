"""CSV exports of a trader's history: ledger postings (the activity page), orders, fills, deposits, withdrawals.

Every amount is written exactly, at its asset's full precision (a plain decimal, never rounded
for display), times in ISO 8601 UTC. Rows are streamed as they are read, newest first. Cells of
free text a user typed (a client order id) are prefixed with ``'`` when a spreadsheet would run
them as a formula.
"""

from collections.abc import Iterable, Iterator
from datetime import datetime

from apps.core.csv_export import text_cell
from apps.ledger.amounts import format_amount
from apps.ledger.models import AccountKind, Posting
from apps.orders.models import Order
from apps.orders.selectors import UserFill
from apps.wallets.models import Deposit, Withdrawal


def _time(value: datetime | None) -> str:
    return value.isoformat() if value is not None else ""


def _exact(value, decimals: int) -> str:
    return "" if value is None else format_amount(value, decimals)


POSTING_HEADER = ["time", "entry_id", "asset", "account", "change", "balance_after", "reason", "reference"]


def posting_rows(postings: Iterable[Posting]) -> Iterator[list]:
    """Activity rows: the change is signed from the user's side (credit to them positive)."""
    for p in postings:
        decimals = p.asset.decimals
        reference = f"{p.entry.reference_type} {p.entry.reference_id}".strip()
        yield [
            _time(p.entry.created_at),
            p.entry_id,
            p.asset.code,
            "on hold" if p.account.kind == AccountKind.USER_HELD else "available",
            _exact(-p.amount, decimals),
            _exact(p.balance_after, decimals),
            p.entry.get_reason_display(),
            reference,
        ]


ORDER_HEADER = [
    "created_at",
    "id",
    "client_order_id",
    "market",
    "side",
    "type",
    "price",
    "qty",
    "quote_qty",
    "filled_qty",
    "filled_quote_qty",
    "average_price",
    "fee_total",
    "fee_asset",
    "time_in_force",
    "status",
    "end_reason",
]


def order_rows(orders: Iterable[Order]) -> Iterator[list]:
    """Order rows; prices and quote amounts at the quote's precision, quantities at the base's."""
    for o in orders:
        base, quote = o.market.base, o.market.quote
        average = o.average_price
        fee_asset = base if o.side == "buy" else quote
        yield [
            _time(o.created_at),
            o.id,
            text_cell(o.client_order_id),
            o.market.symbol,
            o.side,
            o.type,
            _exact(o.price, quote.decimals),
            _exact(o.qty, base.decimals),
            _exact(o.quote_qty, quote.decimals),
            _exact(o.filled_qty, base.decimals),
            _exact(o.filled_quote_qty, quote.decimals),
            "" if average is None else f"{average.normalize():f}",
            _exact(o.fee_total, fee_asset.decimals),
            fee_asset.code,
            o.time_in_force,
            o.status,
            o.reject_reason,
        ]


FILL_HEADER = [
    "time",
    "trade_id",
    "order_id",
    "market",
    "side",
    "price",
    "qty",
    "quote_qty",
    "fee",
    "fee_asset",
    "role",
]


def fill_rows(fills: Iterable[UserFill]) -> Iterator[list]:
    """Fill rows; amounts as the ledger holds them (plain decimals, exact)."""
    for f in fills:
        yield [
            _time(f.time),
            f.id,
            f.order_id,
            f.market,
            f.side,
            f"{f.price.normalize():f}",
            f"{f.qty.normalize():f}",
            f"{f.quote_qty.normalize():f}",
            f"{f.fee.normalize():f}",
            f.fee_asset,
            f.liquidity,
        ]


DEPOSIT_HEADER = ["time", "id", "asset", "amount", "txid", "vout", "confirmations", "status", "address"]


def deposit_rows(deposits: Iterable[Deposit]) -> Iterator[list]:
    for d in deposits:
        yield [
            _time(d.created_at),
            d.id,
            d.asset.code,
            _exact(d.amount, d.asset.decimals),
            d.txid,
            d.vout,
            d.confirmations,
            d.status,
            d.address.address,
        ]


WITHDRAWAL_HEADER = ["created_at", "id", "asset", "amount", "fee", "address", "status", "txid", "updated_at"]


def withdrawal_rows(withdrawals: Iterable[Withdrawal]) -> Iterator[list]:
    for w in withdrawals:
        decimals = w.asset.decimals
        yield [
            _time(w.created_at),
            w.id,
            w.asset.code,
            _exact(w.amount, decimals),
            _exact(w.fee, decimals),
            w.address,
            w.status,
            w.txid,
            _time(w.updated_at),
        ]
