"""Every write of the orders app: markets, fee tiers, order placement and cancellation.

The package's modules (callers import the public names from here, unchanged):
:mod:`~apps.orders.services.markets` (market creation, halt, resume, filters),
:mod:`~apps.orders.services.fees` (fee schedules and tiers),
:mod:`~apps.orders.services.parsing` (an order request checked against the market),
:mod:`~apps.orders.services.placement` (:func:`order_place`),
:mod:`~apps.orders.services.cancel` (:func:`order_cancel`, :func:`order_cancel_by_client_id`,
:func:`open_orders_cancel`),
:mod:`~apps.orders.services.commands` (the public :func:`order_place` and the cancels: inline, or
through the market's sequencer, :mod:`~apps.orders.services.sequencer`, which plans and writes each batch
with :mod:`~apps.orders.services.batching`). The matching and settlement
arithmetic is pure (:mod:`apps.orders.engine`), the SQL is :mod:`apps.orders.store`, the
journal entries come from :mod:`apps.ledger.trading`.
"""

from .commands import (
    open_orders_cancel,
    order_cancel,
    order_cancel_by_client_id,
    order_cancel_by_operator,
    order_judge,
    order_place,
)
from .fees import (
    fee_rate_parse,
    fee_schedule_cap_check,
    fee_schedule_create,
    fee_schedule_make_default,
    fee_schedule_rates_update,
    fee_tier_assign,
)
from .markets import (
    market_create,
    market_filters_check,
    market_filters_update,
    market_halt,
    market_locked,
    market_resume,
    market_state,
)

__all__ = [
    "fee_rate_parse",
    "fee_schedule_cap_check",
    "fee_schedule_create",
    "fee_schedule_make_default",
    "fee_schedule_rates_update",
    "fee_tier_assign",
    "market_create",
    "market_filters_check",
    "market_filters_update",
    "market_halt",
    "market_locked",
    "market_resume",
    "market_state",
    "open_orders_cancel",
    "order_cancel",
    "order_cancel_by_client_id",
    "order_cancel_by_operator",
    "order_judge",
    "order_place",
]
