"""The SQL of the engine's command queue (:class:`~apps.orders.models.Command`).

A caller rings the sequencer of the market on ``orders_engine_<market id>`` once its INSERT is
committed (:mod:`apps.core.doorbell`). The sequencer's :data:`MARK_DONE` stores the outcomes and returns,
for each command whose caller listens (``reply_to``, its thread's Redis channel), the answer it is
sent at the commit (:mod:`apps.orders.services.answers`): the outcome (JSON) and, when the outcome
names an order, that order's row as the batch left it (``"order"``: PostgreSQL's ``to_jsonb`` of
the row), so the caller needs no read to answer.
"""

from dataclasses import dataclass
from decimal import Decimal

from ..models import Command, CommandKind, CommandStatus, Market, Order

_TABLE = Command._meta.db_table


@dataclass(frozen=True)
class QueuedCommand:
    """A pending command as the sequencer reads it (:data:`PENDING`): ``payload`` is the request's arguments."""

    id: int
    market_id: int
    kind: str
    user_id: int
    token: str
    payload: dict


def engine_channel(market_id: int) -> str:
    """The doorbell channel (:mod:`apps.core.doorbell`) on which the sequencer of ``market_id`` hears of new commands."""
    return f"orders_engine_{market_id}"


SUBMIT = f"""
    WITH market AS (SELECT id FROM {Market._meta.db_table} WHERE symbol = %(symbol)s),
    inserted AS (
        INSERT INTO {_TABLE}
            (market_id, kind, user_id, key, request_hash, token, reply_to, payload, status, created_at)
        SELECT market.id, %(kind)s, %(user_id)s, %(key)s, %(request_hash)s, %(token)s, %(reply_to)s,
               %(payload)s::jsonb, '{CommandStatus.PENDING}', now()
        FROM market
        ON CONFLICT DO NOTHING
        RETURNING id, market_id
    )
    SELECT (SELECT id FROM market), id FROM (SELECT 1) one LEFT JOIN inserted ON true
"""
"""Insert a pending command for the market named by symbol. One row: ``(market id, command id)``: no market id for
an unknown symbol, no command id when ``key`` was taken, ``token`` already inserted (a submission sent again after
its connection broke) or, for a placement, its client order id is already queued."""

BY_KEY = f"SELECT token, reply_to, request_hash, outcome FROM {_TABLE} WHERE user_id = %s AND key = %s"
"""The command a user already submitted under an idempotency key."""

BY_TOKEN = f"SELECT token, reply_to, request_hash, outcome FROM {_TABLE} WHERE token = %s"
"""The command with this token (one sent again after a broken connection)."""

BY_PENDING_CLIENT_ORDER_ID = f"""
    SELECT token, reply_to, request_hash, outcome FROM {_TABLE}
    WHERE user_id = %s AND kind = '{CommandKind.PLACE}' AND status = '{CommandStatus.PENDING}'
      AND NULLIF(payload ->> 'client_order_id', '') = %s
"""
"""The user's queued placement with a client order id (the ``command_pending_client_order_id`` index's expression)."""

STATUS = f"SELECT status, outcome FROM {_TABLE} WHERE token = %s"

PENDING = f"""
    SELECT c.id, c.market_id, c.kind, c.user_id, c.token, c.payload
    FROM unnest(%(markets)s::bigint[]) AS m(id),
    LATERAL (
        SELECT * FROM {_TABLE} WHERE status = '{CommandStatus.PENDING}' AND market_id = m.id ORDER BY id LIMIT %(limit)s
    ) c
    ORDER BY c.id
    LIMIT %(limit)s
"""
"""The oldest pending commands of the sequencer's markets (an array; id order is arrival order), at most ``limit``.
Each market's are read in id order from the pending index (``command_pending_per_market``), stopping at the limit:
``market_id = ANY(...)`` over them all read and sorted every pending command of the markets, a whole backlog per
batch (27 ms a batch behind 12,000 queued commands, py-spy)."""

MARK_DONE = f"""
    WITH done AS (
        UPDATE {_TABLE} c SET status = '{CommandStatus.DONE}', outcome = v.outcome - 'placed', done_at = now(),
            key = CASE WHEN v.outcome ? 'error' THEN '' ELSE c.key END
        FROM ROWS FROM (unnest(%s::bigint[]), jsonb_array_elements(%s::jsonb)) AS v(id, outcome)
        WHERE c.id = v.id AND c.status = '{CommandStatus.PENDING}'
        RETURNING c.reply_to, c.token, v.outcome
    )
    SELECT done.reply_to, done.token,
           CASE WHEN done.reply_to = '' THEN NULL
                WHEN o.id IS NULL THEN done.outcome - 'placed'
                ELSE (done.outcome - 'placed') || jsonb_build_object(
                    'order', to_jsonb(jsonb_populate_record(o, coalesce(done.outcome -> 'placed', '{{}}')))) END::text
    FROM done LEFT JOIN {Order._meta.db_table} o
        ON done.reply_to <> '' AND o.id = (done.outcome ->> 'order_id')::bigint
"""
"""Mark applied commands done with their outcomes (command ids; the outcomes as one JSON array, in the same order:
a ``jsonb[]`` literal would escape every quote again); one row per command marked (so a command no longer pending,
applied by another sequencer, is seen missing): ``(reply_to, token, answer JSON)``, the answer ``NULL`` when its
caller does not listen (``reply_to`` empty), else the outcome with, when it names an order, the order's row (the
answer only: the stored outcome keeps the id, and a later reader reads the order afresh). A placement's outcome
may carry ``"placed"`` (:func:`placed_state`): the order's state right after its own placement, which replaces those
columns of the row in the answer (``jsonb_populate_record``: read as the columns' types, so with their scale) and
is not stored. A refused command gives its idempotency key back: a retry under it (after funding the account, say)
is a new command."""

PLACED_COLUMNS = ("filled_qty", "filled_quote_qty", "fee_total", "held_remaining", "status", "reject_reason")
"""What of an order a later command of the same batch may change (a fill as maker, a cancel)."""


def placed_state(order) -> dict[str, str]:
    """``"placed"`` of a placement's outcome (:data:`MARK_DONE`): :data:`PLACED_COLUMNS` of ``order`` (an
    :class:`~apps.orders.models.Order` or an :class:`~apps.orders.engine.batch.OrderState` right after its
    placement), amounts in plain notation. The caller is answered with the order as its placement left it, as
    Binance answers (``NEW`` and the order's own taker fills); what a later command of the same batch did to it
    reaches the caller on the streams (break-it review: an answer said ``FILLED`` with no fills, another 201
    ``cancelled``, because the row was read at the end of the batch)."""
    state = {}
    for name in PLACED_COLUMNS:
        value = getattr(order, name)
        state[name] = format(value, "f") if isinstance(value, Decimal) else str(value)
    return state
