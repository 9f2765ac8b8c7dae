"""The orders app's part of reconciliation (DESIGN.md section 5).

- Invariant 4: open orders explain held funds: per user and asset, the sum of the
  ``held_remaining`` of their open orders (a hold source summed with the others).
- Invariant 8: an ended order has no remaining hold; every order's hold, fills and
  release add up (held amount = what its fills consumed + what was released + what it
  still holds); every trade is settled by its own ``trade:<id>`` entry.
- Invariant 8, backing (see :mod:`apps.ledger.checks`): every journal entry of the reasons ``trade``,
  ``order_hold`` and ``order_release`` is the entry of the trade or order it names, posted by its recipe
  (DESIGN.md section 4), so an entry forged with a made-up or a real order's or trade's reference is found.

Each check is one query for the offending rows; amounts are strings at the asset's precision.
"""

from decimal import Decimal

from apps.ledger.models import EntryReason
from apps.ledger.reconciliation import (
    ENTRY_IN_SCOPE,
    REFERENCE_NUMBER,
    ROW_LIMIT,
    Scope,
    format_amounts,
    query_rows,
    register_backed_reasons,
    register_check,
    register_hold_source,
)

from .models import OPEN_STATUSES

ORDER_REASONS = (EntryReason.TRADE, EntryReason.ORDER_HOLD, EntryReason.ORDER_RELEASE)
register_backed_reasons(*ORDER_REASONS)


@register_hold_source
def open_order_holds(scope: Scope) -> dict[tuple[int, int], Decimal]:
    """``{(user id, asset id): sum of held_remaining of the user's open orders}`` (invariant 4)."""
    rows = query_rows(
        """
        SELECT user_id, held_asset_id, sum(held_remaining) AS held
        FROM orders_order
        WHERE status IN ('open', 'partially_filled') AND held_asset_id = ANY(%s)
        GROUP BY user_id, held_asset_id
        """,
        [scope.asset_ids],
    )
    return {(row["user_id"], row["held_asset_id"]): row["held"] for row in rows}


@register_check(invariant=8, name="ended_orders_hold_nothing")
def ended_orders_hold_nothing(scope: Scope) -> list[dict]:
    """Ended orders (filled, cancelled, expired, rejected) that still have a remaining hold."""
    rows = query_rows(
        """
        SELECT o.id AS order_id, o.user_id AS owner, o.status, s.code AS asset, s.decimals, o.held_remaining
        FROM orders_order o JOIN ledger_asset s ON s.id = o.held_asset_id
        WHERE o.status NOT IN ('open', 'partially_filled') AND o.held_remaining <> 0 AND o.held_asset_id = ANY(%s)
        ORDER BY o.id LIMIT %s
        """,
        [scope.asset_ids, ROW_LIMIT],
    )
    return format_amounts(rows, "held_remaining")


@register_check(invariant=8, name="order_holds_add_up")
def order_holds_add_up(scope: Scope) -> list[dict]:
    """Orders whose ledger entries on their owner's held account do not add up.

    For each order: its hold entry credits ``held_amount`` to user_held; its fills (as
    taker or maker) and its release debit user_held; what is left must be its
    ``held_remaining``. Matched through the entries' references (``order``/``<id>`` for
    hold and release, ``trade``/``<id>`` for fills) and the trades' order ids.
    """
    rows = query_rows(
        """
        WITH movements AS (
            SELECT o.id AS order_id,
                   sum(CASE WHEN e.reason = 'order_hold' THEN -p.amount ELSE 0 END) AS held,
                   sum(CASE WHEN e.reason = 'order_release' THEN p.amount ELSE 0 END) AS released
            FROM orders_order o
            JOIN ledger_journalentry e ON e.reference_type = 'order' AND e.reference_id = o.id::text
            JOIN ledger_posting p ON p.entry_id = e.id
            JOIN ledger_account a ON a.id = p.account_id AND a.kind = 'user_held' AND a.owner_id = o.user_id
            WHERE o.held_asset_id = ANY(%s)
            GROUP BY o.id
        ), consumed AS (
            SELECT o.id AS order_id, sum(p.amount) AS consumed
            FROM orders_trade t
            JOIN orders_order o ON o.id IN (t.taker_order_id, t.maker_order_id)
            JOIN ledger_posting p ON p.entry_id = t.entry_id
            JOIN ledger_account a ON a.id = p.account_id AND a.kind = 'user_held' AND a.owner_id = o.user_id
            WHERE o.held_asset_id = ANY(%s)
            GROUP BY o.id
        )
        SELECT o.id AS order_id, o.user_id AS owner, o.status, s.code AS asset, s.decimals,
               o.held_amount, COALESCE(m.held, 0) AS held_by_entries, COALESCE(c.consumed, 0) AS consumed_by_fills,
               COALESCE(m.released, 0) AS released, o.held_remaining
        FROM orders_order o
        JOIN ledger_asset s ON s.id = o.held_asset_id
        LEFT JOIN movements m ON m.order_id = o.id
        LEFT JOIN consumed c ON c.order_id = o.id
        WHERE o.held_asset_id = ANY(%s)
          AND (COALESCE(m.held, 0) <> o.held_amount
               OR o.held_amount - COALESCE(c.consumed, 0) - COALESCE(m.released, 0) <> o.held_remaining)
        ORDER BY o.id LIMIT %s
        """,
        [scope.asset_ids, scope.asset_ids, scope.asset_ids, ROW_LIMIT],
    )
    return format_amounts(rows, "held_amount", "held_by_entries", "consumed_by_fills", "released", "held_remaining")


@register_check(invariant=8, name="trades_settled_by_their_entry")
def trades_settled_by_their_entry(scope: Scope) -> list[dict]:
    """Trades whose journal entry is not ``trade:<id>`` with reason ``trade``, or whose fill does not add up.

    The entry must move ``qty`` of base out of the seller's held funds and ``quote_qty``
    of quote out of the buyer's.
    """
    return query_rows(
        """
        WITH held AS (
            SELECT t.id AS trade, a.asset_id, sum(p.amount) AS debited
            FROM orders_trade t
            JOIN ledger_posting p ON p.entry_id = t.entry_id
            JOIN ledger_account a ON a.id = p.account_id AND a.kind = 'user_held'
            JOIN orders_market m ON m.id = t.market_id
            WHERE m.base_id = ANY(%s) OR m.quote_id = ANY(%s)
            GROUP BY t.id, a.asset_id
        )
        SELECT t.id AS trade, e.idempotency_key, e.reason
        FROM orders_trade t
        JOIN orders_market m ON m.id = t.market_id
        JOIN ledger_journalentry e ON e.id = t.entry_id
        LEFT JOIN held hb ON hb.trade = t.id AND hb.asset_id = m.base_id
        LEFT JOIN held hq ON hq.trade = t.id AND hq.asset_id = m.quote_id
        WHERE (m.base_id = ANY(%s) OR m.quote_id = ANY(%s))
          AND (e.idempotency_key <> 'trade:' || t.id OR e.reason <> 'trade'
               OR hb.debited IS DISTINCT FROM t.qty OR hq.debited IS DISTINCT FROM t.quote_qty)
        ORDER BY t.created_at, t.id LIMIT %s
        """,
        [scope.asset_ids, scope.asset_ids, scope.asset_ids, scope.asset_ids, ROW_LIMIT],
    )


@register_check(invariant=8, name="order_entries_backed")
def order_entries_backed(scope: Scope) -> list[dict]:
    """Journal entries of the reasons ``trade``, ``order_hold`` and ``order_release`` that no trade or order backs.

    A ``trade`` entry must be the entry of a trade (``orders_trade.entry_id``, unique, so of exactly one) keyed
    ``trade:<trade id>`` with the reference ``trade``/``<trade id>``. An ``order_hold`` or ``order_release`` entry
    must name an existing order (reference ``order``/``<order id>``) under the order's own key
    ``order:<id>:hold`` or ``order:<id>:release`` (a release only once the order has ended: open and partially
    filled orders still hold), and every posting must be on its owner's accounts of the asset
    the order holds: a hold debits available and credits held by the order's ``held_amount``, a release debits
    held and credits available (how much is :func:`order_holds_add_up`'s to check). A trade entry's amounts are
    :func:`trades_settled_by_their_entry`'s to check. Rows: entry, key, reason, reference and the problem.

    Reads every journal entry (a sequential scan filtered on the three reasons); per trade entry one lookup of the
    unique index on ``orders_trade.entry_id`` (or a hash anti-join over the trades, as the planner prefers); per
    hold or release entry one order by primary key and its two postings (index on ``ledger_posting.entry_id``)
    with their accounts by primary key.
    """
    return query_rows(
        f"""
        WITH judged AS (
            SELECT e.id, e.idempotency_key, e.reason, e.reference_type, e.reference_id, t.id AS trade, o.id AS order_id,
                   o.status,
                   e.reference_type = 'order'
                   AND e.idempotency_key = 'order:' || o.id || CASE e.reason WHEN 'order_hold' THEN ':hold'
                                                                             ELSE ':release' END AS keyed,
                   e.reason = 'order_hold' OR o.status <> ALL(%s) AS in_state,
                   CASE WHEN o.id IS NOT NULL THEN NOT EXISTS (
                       SELECT 1 FROM ledger_posting p JOIN ledger_account a ON a.id = p.account_id
                       WHERE p.entry_id = e.id AND (
                           a.owner_id = o.user_id AND p.asset_id = o.held_asset_id
                           AND CASE e.reason
                               WHEN 'order_hold' THEN (a.kind = 'user_available' AND p.amount = o.held_amount)
                                                   OR (a.kind = 'user_held' AND p.amount = -o.held_amount)
                               ELSE (a.kind = 'user_held' AND p.amount > 0)
                                 OR (a.kind = 'user_available' AND p.amount < 0)
                           END
                       ) IS NOT TRUE
                   ) END AS postings_match
            FROM ledger_journalentry e
            LEFT JOIN orders_trade t
                   ON e.reason = 'trade' AND t.entry_id = e.id
                  AND e.idempotency_key = 'trade:' || t.id AND e.reference_type = 'trade' AND e.reference_id = t.id
            LEFT JOIN orders_order o ON e.reason <> 'trade' AND o.id = {REFERENCE_NUMBER}
            WHERE e.reason = ANY(%s) AND {ENTRY_IN_SCOPE}
        )
        SELECT id AS entry, idempotency_key, reason, reference_type, reference_id,
               CASE
                   WHEN reason = 'trade' THEN 'no trade is settled by this entry under its key'
                   WHEN order_id IS NULL THEN 'no such order'
                   WHEN NOT keyed THEN 'not the order''s own key'
                   WHEN NOT in_state THEN 'a release of an order still ' || status
                   ELSE 'a posting is not the order''s on its owner''s accounts'
               END AS problem
        FROM judged
        WHERE CASE WHEN reason = 'trade' THEN trade IS NULL
                   ELSE order_id IS NULL OR NOT keyed OR NOT in_state OR NOT postings_match END
        ORDER BY id LIMIT %s
        """,
        [list(OPEN_STATUSES), list(ORDER_REASONS), *scope.entry_params, ROW_LIMIT],
    )
