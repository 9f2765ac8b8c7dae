"""The values the engine decides with: sides, order types, time in force, self-trade prevention,
statuses and end reasons.

The same strings as the models' choices (:mod:`apps.orders.models`), as ``StrEnum``\\ s so the
engine needs no Django import; ``apps/orders/tests/test_engine.py`` checks that the two agree
value for value. A member compares equal to the model choice of the same value.
"""

import enum


class Side(enum.StrEnum):
    BUY = "buy"
    SELL = "sell"


class OrderType(enum.StrEnum):
    LIMIT = "limit"
    MARKET = "market"


class TimeInForce(enum.StrEnum):
    GTC = "GTC"
    IOC = "IOC"
    FOK = "FOK"


class SelfTradePrevention(enum.StrEnum):
    EXPIRE_TAKER = "expire_taker"
    EXPIRE_MAKER = "expire_maker"
    EXPIRE_BOTH = "expire_both"


class OrderStatus(enum.StrEnum):
    OPEN = "open"
    PARTIALLY_FILLED = "partially_filled"
    FILLED = "filled"
    CANCELLED = "cancelled"
    REJECTED = "rejected"
    EXPIRED = "expired"


OPEN_STATUSES = (OrderStatus.OPEN, OrderStatus.PARTIALLY_FILLED)


class EndReason(enum.StrEnum):
    NONE = ""
    CANCELLED = "cancelled"
    CANCELLED_BY_OPERATOR = "cancelled_by_operator"
    SELF_TRADE_PREVENTION = "self_trade_prevention"
    UNFILLED_REMAINDER = "unfilled_remainder"
    NO_LIQUIDITY = "no_liquidity"
    PRICE_PROTECTION = "price_protection"
