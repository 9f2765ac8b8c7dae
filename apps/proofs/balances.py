"""The consistent read behind a snapshot: every user's balances as of the latest sealed block.

"As of a block's commit point" means: counting exactly the entries sealed in that block or
before it. The read runs in one ``REPEATABLE READ`` transaction, so it sees one committed
state: the latest block visible in it is ``h``, every entry sealed up to ``h`` is visible
(a block commits after the entries it seals), and no later block is. Each user account's
stored balance in that state counts every visible entry, so the balance at ``h`` is the
stored balance less the postings of the visible entries that are in no block yet (seconds'
worth of entries, not a re-summing of the journal).
"""

from collections.abc import Iterator
from decimal import Decimal

from django.db import connection

from apps.ledger.models import USER_KINDS, AccountKind, Asset

_BALANCES_AT_LATEST_BLOCK = """
    WITH unsealed AS (
        SELECT p.account_id, sum(p.amount) AS amount
        FROM ledger_journalentry e JOIN ledger_posting p ON p.entry_id = e.id
        WHERE NOT EXISTS (SELECT 1 FROM ledger_blockentry b WHERE b.entry_id = e.id)
        GROUP BY p.account_id
    ), balances AS (
        -- User accounts are credit-normal (balance = -sum of postings): leaving a posting out adds it back.
        SELECT a.owner_id, a.asset_id, sum(a.balance + COALESCE(u.amount, 0)) AS balance
        FROM ledger_account a LEFT JOIN unsealed u ON u.account_id = a.id
        WHERE a.kind = ANY(%s)
        GROUP BY a.owner_id, a.asset_id
        HAVING sum(a.balance + COALESCE(u.amount, 0)) <> 0
    ), units AS (
        SELECT b.owner_id, b.asset_id, b.balance * power(10::numeric, s.decimals) AS units
        FROM balances b JOIN ledger_asset s ON s.id = b.asset_id
    )
    SELECT owner_id, array_agg(asset_id), array_agg(trunc(units)::text), bool_or(units < 0 OR units <> trunc(units))
    FROM units GROUP BY owner_id ORDER BY owner_id
"""
# Users per round trip of the server-side cursor.
_FETCH = 20000


class BalanceError(ValueError):
    """A stored balance that cannot be a leaf: negative, or not a multiple of its asset's precision."""


def user_balances_at_latest_block(assets: list[Asset]) -> Iterator[tuple[int, tuple[int, ...]]]:
    """``(user id, balances in smallest units in the order of assets)`` for every user with a non-zero
    balance, by user id, read through a server-side cursor. Must run inside the snapshot's
    ``REPEATABLE READ`` transaction. Raises :class:`BalanceError` for a negative balance or one that is
    not a multiple of its asset's precision."""
    index = {asset.id: i for i, asset in enumerate(assets)}
    zeros = [0] * len(assets)
    with connection.connection.cursor(name="liabilities_snapshot") as cursor:
        cursor.execute(_BALANCES_AT_LATEST_BLOCK, [list(USER_KINDS)])
        while rows := cursor.fetchmany(_FETCH):
            for owner_id, asset_ids, units, invalid in rows:
                if invalid:
                    raise BalanceError(f"user {owner_id} has a balance no leaf can hold (negative or inexact)")
                vector = zeros.copy()
                for asset_id, value in zip(asset_ids, units, strict=True):
                    vector[index[asset_id]] = int(value)
                yield owner_id, tuple(vector)


_CUSTODY_SINCE_LATEST_BLOCK = """
    SELECT a.asset_id, sum(p.amount)
    FROM ledger_journalentry e
    JOIN ledger_posting p ON p.entry_id = e.id
    JOIN ledger_account a ON a.id = p.account_id
    WHERE a.kind = %s AND NOT EXISTS (SELECT 1 FROM ledger_blockentry b WHERE b.entry_id = e.id)
    GROUP BY a.asset_id
"""


def custody_since_latest_block() -> dict[int, Decimal]:
    """Per asset id, what the ledger's custody balance (debit-normal: the sum of its postings) moved by in the entries
    no block seals yet: the custody balance now less that is the balance at the latest block. Must run inside the
    snapshot's ``REPEATABLE READ`` transaction."""
    with connection.cursor() as cursor:
        cursor.execute(_CUSTODY_SINCE_LATEST_BLOCK, [AccountKind.CUSTODY])
        return dict(cursor.fetchall())
