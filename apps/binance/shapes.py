"""Our objects in Binance's JSON (spot API documentation): names, enums, decimals as strings, times in ms.

Symbols lose the dash (``BTC-USDT`` is ``BTCUSDT``). Decimals are strings at the asset's
precision. Order statuses: open NEW, partially_filled PARTIALLY_FILLED, filled FILLED,
cancelled CANCELED, rejected REJECTED, expired EXPIRED, and EXPIRED_IN_MATCH when self-trade
prevention ended it. A post-only limit order is ``LIMIT_MAKER``.
"""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from apps.ledger.amounts import MAX_INTEGER_DIGITS, format_amount
from apps.orders.models import (
    EndReason,
    Market,
    MarketStatus,
    Order,
    OrderStatus,
    OrderType,
    SelfTradePrevention,
    Side,
    Trade,
)
from apps.orders.services.parsing import max_notional

from .selectors import trade_number

STATUSES: dict[str, str] = {
    OrderStatus.OPEN: "NEW",
    OrderStatus.PARTIALLY_FILLED: "PARTIALLY_FILLED",
    OrderStatus.FILLED: "FILLED",
    OrderStatus.CANCELLED: "CANCELED",
    OrderStatus.REJECTED: "REJECTED",
    OrderStatus.EXPIRED: "EXPIRED",
}
STP_MODES = {
    "EXPIRE_TAKER": SelfTradePrevention.EXPIRE_TAKER,
    "EXPIRE_MAKER": SelfTradePrevention.EXPIRE_MAKER,
    "EXPIRE_BOTH": SelfTradePrevention.EXPIRE_BOTH,
}
STP_NAMES: dict[str, str] = {ours: theirs for theirs, ours in STP_MODES.items()}
ORDER_TYPES = ("LIMIT", "MARKET", "LIMIT_MAKER")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms(value: datetime) -> int:
    """Milliseconds since the epoch, rounded half up from the microsecond (exactly, with integers), as
    PostgreSQL's ``(extract(epoch FROM t) * 1000)::bigint`` gives them to the streams' events."""
    return ((value - _EPOCH) // timedelta(microseconds=1) + 500) // 1000


def from_ms(value: int) -> datetime:
    """The aware UTC datetime of ``value`` milliseconds since the epoch, exactly (integer arithmetic)."""
    return _EPOCH + timedelta(milliseconds=value)


def binance_symbol(market: Market) -> str:
    return market.symbol.replace("-", "")


def price_text(value: Decimal | None, market: Market) -> str:
    return format_amount(value or Decimal(0), market.quote.decimals)


def qty_text(value: Decimal | None, market: Market) -> str:
    return format_amount(value or Decimal(0), market.base.decimals)


def market_info(market: Market) -> dict:
    """One entry of ``exchangeInfo.symbols``."""
    tick, step = price_text(market.tick_size, market), qty_text(market.step_size, market)
    largest = Decimal(10) ** MAX_INTEGER_DIGITS  # every amount stays below it (apps.ledger.amounts)
    min_qty, max_qty = qty_text(market.min_qty, market), qty_text(market.max_qty, market)
    return {
        "symbol": binance_symbol(market),
        "status": "TRADING" if market.status == MarketStatus.ACTIVE else "HALT",
        "baseAsset": market.base.code,
        "baseAssetPrecision": market.base.decimals,
        "quoteAsset": market.quote.code,
        "quotePrecision": market.quote.decimals,
        "quoteAssetPrecision": market.quote.decimals,
        "baseCommissionPrecision": market.base.decimals,
        "quoteCommissionPrecision": market.quote.decimals,
        "orderTypes": list(ORDER_TYPES),
        "icebergAllowed": False,
        "ocoAllowed": False,
        "otoAllowed": False,
        "quoteOrderQtyMarketAllowed": True,
        "allowTrailingStop": False,
        "cancelReplaceAllowed": False,
        "amendAllowed": False,
        "isSpotTradingAllowed": True,
        "isMarginTradingAllowed": False,
        "filters": [
            {
                "filterType": "PRICE_FILTER",
                "minPrice": tick,
                "maxPrice": price_text(largest - market.tick_size, market),
                "tickSize": tick,
            },
            {"filterType": "LOT_SIZE", "minQty": min_qty, "maxQty": max_qty, "stepSize": step},
            {"filterType": "MARKET_LOT_SIZE", "minQty": min_qty, "maxQty": max_qty, "stepSize": step},
            {
                "filterType": "NOTIONAL",
                "minNotional": price_text(market.min_notional, market),
                "applyMinToMarket": True,
                "maxNotional": price_text(max_notional(market.quote.decimals), market),
                "applyMaxToMarket": False,
                "avgPriceMins": 0,
            },
        ],
        "permissions": [],
        "permissionSets": [["SPOT"]],
        "defaultSelfTradePreventionMode": "EXPIRE_TAKER",
        "allowedSelfTradePreventionModes": list(STP_MODES),
    }


def order_type(order: Order) -> str:
    if order.type == OrderType.MARKET:
        return "MARKET"
    return "LIMIT_MAKER" if order.post_only else "LIMIT"


def order_status(order: Order) -> str:
    if order.status == OrderStatus.EXPIRED and order.reject_reason == EndReason.SELF_TRADE_PREVENTION:
        return "EXPIRED_IN_MATCH"
    return STATUSES[order.status]


def _order_core(order: Order, market: Market) -> dict:
    orig_qty = order.qty if order.qty is not None else order.filled_qty
    return {
        "symbol": binance_symbol(market),
        "orderId": order.id,
        "orderListId": -1,
        "clientOrderId": order.client_order_id,
        "price": price_text(order.price, market),
        "origQty": qty_text(orig_qty, market),
        "executedQty": qty_text(order.filled_qty, market),
        "origQuoteOrderQty": price_text(order.quote_qty, market),
        "cummulativeQuoteQty": price_text(order.filled_quote_qty, market),
        "status": order_status(order),
        "timeInForce": order.time_in_force,
        "type": order_type(order),
        "side": "BUY" if order.side == Side.BUY else "SELL",
    }


def order_query(order: Order, market: Market) -> dict:
    """``GET /api/v3/order`` (also ``openOrders``, ``allOrders``)."""
    return {
        **_order_core(order, market),
        "stopPrice": price_text(None, market),
        "icebergQty": qty_text(None, market),
        "time": ms(order.created_at),
        "updateTime": ms(order.updated_at),
        "isWorking": True,
        "workingTime": ms(order.created_at),
        "selfTradePreventionMode": STP_NAMES[order.stp],
    }


def fill(trade: Trade, market: Market) -> dict:
    """One entry of a FULL response's ``fills``: the taker's side of ``trade``."""
    buy = trade.taker_side == Side.BUY
    return {
        "price": price_text(trade.price, market),
        "qty": qty_text(trade.qty, market),
        "commission": (qty_text if buy else price_text)(trade.taker_fee, market),
        "commissionAsset": market.base.code if buy else market.quote.code,
        "tradeId": trade_number(trade),
    }


def order_ack(order: Order, market: Market, transact_ms: int) -> dict:
    return {
        "symbol": binance_symbol(market),
        "orderId": order.id,
        "orderListId": -1,
        "clientOrderId": order.client_order_id,
        "transactTime": transact_ms,
    }


def order_result(order: Order, market: Market, transact_ms: int) -> dict:
    return {
        **order_ack(order, market, transact_ms),
        **_order_core(order, market),
        "workingTime": ms(order.created_at),
        "selfTradePreventionMode": STP_NAMES[order.stp],
    }


def order_cancelled(order: Order, market: Market, cancel_client_id: str, transact_ms: int) -> dict:
    """``DELETE /api/v3/order``: the order as cancelled; ``clientOrderId`` is the cancel's own id."""
    return {
        **_order_core(order, market),
        "origClientOrderId": order.client_order_id,
        "clientOrderId": cancel_client_id,
        "transactTime": transact_ms,
        "selfTradePreventionMode": STP_NAMES[order.stp],
    }


def public_trade(trade: Trade, market: Market) -> dict:
    """``trades`` / ``historicalTrades``."""
    return {
        "id": trade_number(trade),
        "price": price_text(trade.price, market),
        "qty": qty_text(trade.qty, market),
        "quoteQty": price_text(trade.quote_qty, market),
        "time": ms(trade.created_at),
        "isBuyerMaker": trade.taker_side == Side.SELL,
        "isBestMatch": True,
    }


def my_trade(trade: Trade, market: Market, user_id: int) -> dict:
    """``myTrades``: ``trade`` from ``user_id``'s side."""
    taker = trade.taker_user_id == user_id
    buyer = trade.buyer_id == user_id
    fee = trade.taker_fee if taker else trade.maker_fee
    return {
        "symbol": binance_symbol(market),
        "id": trade_number(trade),
        "orderId": trade.taker_order_id if taker else trade.maker_order_id,
        "orderListId": -1,
        "price": price_text(trade.price, market),
        "qty": qty_text(trade.qty, market),
        "quoteQty": price_text(trade.quote_qty, market),
        "commission": (qty_text if buyer else price_text)(fee, market),
        "commissionAsset": market.base.code if buyer else market.quote.code,
        "time": ms(trade.created_at),
        "isBuyer": buyer,
        "isMaker": not taker,
        "isBestMatch": True,
    }
