"""The ledger's reconciliation checks: invariants 1, 2, 3, 6 and 7 of DESIGN.md section 5, and the ledger's part
of invariant 8's backing rule.

Backing (invariant 8, the direction from the journal to the business): every journal entry is backed by the
business record of its reason, the record that names it: a trade, an order, a credited deposit, a withdrawal in
the matching state, an approved manual adjustment. The app that keeps each record checks its reasons
(:func:`~apps.ledger.reconciliation.register_backed_reasons`); the ledger flags the entries of every other reason,
which no business record can justify. So a balanced entry forged into the journal (written past the services, or
posted by a bug with no business event behind it) fails reconciliation.

Each check is a query for the rows that break the invariant; an empty result passes.
Amounts in the details are strings of the asset's precision.
"""

from collections import defaultdict
from dataclasses import asdict
from decimal import Decimal

from django.apps import apps as django_apps

from apps.core.triggers import installed_form

from .amounts import format_amount
from .models import DEBIT_NORMAL_KINDS, USER_KINDS, AccountKind
from .reconciliation import (
    ENTRY_IN_SCOPE,
    ROW_LIMIT,
    Scope,
    backed_reasons,
    format_amounts,
    hold_sources,
    query_rows,
    register_asset_figures,
    register_check,
)


@register_check(invariant=1, name="entries_balanced")
def entries_balanced(scope: Scope) -> list[dict]:
    """Entries whose postings do not sum to zero per asset, or that have fewer than two postings."""
    unbalanced = query_rows(
        """
        SELECT p.entry_id AS entry, e.idempotency_key, s.code AS asset, s.decimals, sum(p.amount) AS imbalance,
               'postings do not sum to zero' AS problem
        FROM ledger_posting p
        JOIN ledger_journalentry e ON e.id = p.entry_id
        JOIN ledger_asset s ON s.id = p.asset_id
        WHERE p.asset_id = ANY(%s)
        GROUP BY p.entry_id, e.idempotency_key, s.code, s.decimals
        HAVING sum(p.amount) <> 0
        ORDER BY p.entry_id LIMIT %s
        """,
        [scope.asset_ids, ROW_LIMIT],
    )
    thin = query_rows(
        """
        SELECT e.id AS entry, e.idempotency_key, count(p.id) AS postings, 'fewer than two postings' AS problem
        FROM ledger_journalentry e LEFT JOIN ledger_posting p ON p.entry_id = e.id
        GROUP BY e.id HAVING count(p.id) < 2
        ORDER BY e.id LIMIT %s
        """,
        [ROW_LIMIT],
    )
    return format_amounts(unbalanced, "imbalance") + (thin if not scope.filtered else [])


@register_check(invariant=1, name="postings_referenced")
def postings_referenced(scope: Scope) -> list[dict]:
    """Postings whose journal entry does not exist, whose account does not exist with the posting's asset, or whose
    amount or balance after is finer than the asset's precision (the ``entry_balanced`` trigger refuses the first
    three at insert; this finds any written past it: a change below the smallest unit moves no sum any check of
    whole units sees)."""
    return query_rows(
        """
        SELECT p.id AS posting, p.entry_id AS entry, p.account_id AS account, p.asset_id,
               CASE WHEN e.id IS NULL THEN 'no such journal entry'
                    WHEN a.id IS NULL THEN 'no account of this asset'
                    ELSE 'finer than the asset''s precision' END AS problem
        FROM ledger_posting p
        LEFT JOIN ledger_journalentry e ON e.id = p.entry_id
        LEFT JOIN ledger_account a ON a.id = p.account_id AND a.asset_id = p.asset_id
        LEFT JOIN ledger_asset s ON s.id = p.asset_id
        WHERE (e.id IS NULL OR a.id IS NULL
               OR round(p.amount, s.decimals) <> p.amount OR round(p.balance_after, s.decimals) <> p.balance_after)
          AND (NOT %s OR p.asset_id = ANY(%s))
        ORDER BY p.id LIMIT %s
        """,
        [scope.filtered, scope.asset_ids, ROW_LIMIT],  # unfiltered: a posting of an unknown asset too
    )


@register_check(invariant=2, name="balances_match_postings")
def balances_match_postings(scope: Scope, *, kinds: tuple[str, ...] | None = None) -> list[dict]:
    """Accounts whose stored balance differs from the sum of their postings or from the last balance-after
    (only accounts of ``kinds`` when given, e.g. the customers' ``USER_KINDS``)."""
    rows = query_rows(
        """
        WITH sums AS (
            SELECT account_id, sum(amount) AS total, count(*) AS postings, max(id) AS last_id
            FROM ledger_posting WHERE asset_id = ANY(%s) GROUP BY account_id
        )
        SELECT a.id AS account, a.kind, a.owner_id AS owner, s.code AS asset, s.decimals,
               a.balance AS stored_balance,
               COALESCE(sums.total, 0) * CASE WHEN a.kind = ANY(%s) THEN 1 ELSE -1 END AS postings_balance,
               COALESCE(last.balance_after, 0) AS last_balance_after,
               a.version, COALESCE(sums.postings, 0) AS postings
        FROM ledger_account a
        JOIN ledger_asset s ON s.id = a.asset_id
        LEFT JOIN sums ON sums.account_id = a.id
        LEFT JOIN ledger_posting last ON last.id = sums.last_id
        WHERE a.asset_id = ANY(%s) AND (%s::text[] IS NULL OR a.kind = ANY(%s::text[]))
          AND (a.balance <> COALESCE(sums.total, 0) * CASE WHEN a.kind = ANY(%s) THEN 1 ELSE -1 END
               OR a.balance <> COALESCE(last.balance_after, 0)
               OR a.version <> COALESCE(sums.postings, 0))
        ORDER BY a.id LIMIT %s
        """,
        [
            scope.asset_ids,
            list(DEBIT_NORMAL_KINDS),
            scope.asset_ids,
            None if kinds is None else list(kinds),
            None if kinds is None else list(kinds),
            list(DEBIT_NORMAL_KINDS),
            ROW_LIMIT,
        ],
    )
    return format_amounts(rows, "stored_balance", "postings_balance", "last_balance_after")


@register_check(invariant=3, name="user_balances_not_negative")
def user_balances_not_negative(scope: Scope) -> list[dict]:
    """User accounts below zero now, or at any posting in their history."""
    rows = query_rows(
        """
        SELECT a.id AS account, a.kind, a.owner_id AS owner, s.code AS asset, s.decimals,
               a.balance, min(p.balance_after) AS lowest_balance_after
        FROM ledger_account a
        JOIN ledger_asset s ON s.id = a.asset_id
        LEFT JOIN ledger_posting p ON p.account_id = a.id
        WHERE a.kind = ANY(%s) AND a.asset_id = ANY(%s)
        GROUP BY a.id, s.code, s.decimals
        HAVING a.balance < 0 OR min(p.balance_after) < 0
        ORDER BY a.id LIMIT %s
        """,
        [list(USER_KINDS), scope.asset_ids, ROW_LIMIT],
    )
    return format_amounts(rows, "balance", "lowest_balance_after")


@register_check(invariant=4, name="held_matches_open_holds")
def held_matches_open_holds(scope: Scope) -> list[dict]:
    """Per user and asset, ``user_held`` equals the remaining holds the hold sources report.

    The sources are the apps' live objects (open orders, pending withdrawals); see
    :func:`apps.ledger.reconciliation.register_hold_source`.
    """
    expected: dict[tuple[int, int], Decimal] = defaultdict(Decimal)
    for source in hold_sources():
        for key, amount in source(scope).items():
            expected[key] += amount
    held = query_rows(
        """
        SELECT a.id AS account, a.owner_id AS owner, a.asset_id, s.code AS asset, s.decimals, a.balance
        FROM ledger_account a JOIN ledger_asset s ON s.id = a.asset_id
        WHERE a.kind = %s AND a.asset_id = ANY(%s)
        """,
        [AccountKind.USER_HELD, scope.asset_ids],
    )
    decimals = {asset.id: (asset.code, asset.decimals) for asset in scope.assets}
    by_key = {(row["owner"], row["asset_id"]): row for row in held}
    problems = []
    for owner, asset_id in sorted(by_key.keys() | expected.keys()):
        if asset_id not in decimals:
            continue
        row = by_key.get((owner, asset_id))
        balance = row["balance"] if row else Decimal(0)
        if balance != expected.get((owner, asset_id), Decimal(0)):
            code, places = decimals[asset_id]
            problems.append(
                {
                    "account": row["account"] if row else None,
                    "owner": owner,
                    "asset": code,
                    "held": format_amount(balance, places),
                    "open_holds": format_amount(expected.get((owner, asset_id), Decimal(0)), places),
                }
            )
    return problems


# The triggers that make journal rows append-only and balanced, and postings name their entry and account
# (see models.py: an account is permanent, with a fixed id and asset, so a posting's check stays true).
REQUIRED_TRIGGERS = {
    ("ledger_account", "pgtrigger_permanent_"),
    ("ledger_account", "pgtrigger_keys_fixed_"),
    ("ledger_account", "pgtrigger_truncated_with_postings_"),
    ("ledger_journalentry", "pgtrigger_truncated_with_postings_"),
    ("ledger_blockentry", "pgtrigger_immutable_"),
    ("ledger_journalblock", "pgtrigger_immutable_"),
    ("ledger_signingkey", "pgtrigger_immutable_"),
    ("ledger_journalentry", "pgtrigger_immutable_"),
    ("ledger_journalentry", "pgtrigger_has_postings_"),
    ("ledger_posting", "pgtrigger_immutable_"),
    ("ledger_posting", "pgtrigger_entry_balanced_"),
}


_NOT_FIRING_ALWAYS = {
    "D": "disabled",
    "R": "fires only on a replica",
    "O": "skipped by sessions with session_replication_role = replica (not ENABLE ALWAYS)",
}
"""``pg_trigger.tgenabled`` of a trigger that does not fire in every session, and what that means; ``A`` (always),
as :class:`apps.core.triggers.EnforcedAlwaysTriggerSql` installs them, is the one state that passes."""


@register_check(invariant=6, name="journal_append_only")
def journal_append_only(scope: Scope) -> list[dict]:
    """The triggers that refuse UPDATE/DELETE of journal rows, blocks and keys (and check balance and each
    posting's entry and account), the deletion or re-keying of an account and a TRUNCATE that would leave postings
    behind are installed as their migrations install them (the same function, body, events, level and timing, a
    ``WHEN`` condition only where the model has one) and fire in every session (``ENABLE ALWAYS``: neither
    disabled, nor replica-only, nor skipped by a session in replica mode). A superuser could otherwise neuter one
    and leave it looking in place: its function replaced by one that lets everything through, or the trigger
    recreated ``WHEN (false)`` (break-it review). The catalog is named with its schema: a ``search_path`` with
    another schema first could otherwise answer with a view of someone's making."""
    installed = query_rows(
        """
        SELECT c.relname AS table_name, t.tgname AS trigger_name, t.tgenabled AS enabled, t.tgtype AS tgtype,
               t.tgqual IS NOT NULL AS has_condition, p.proname AS function_name, p.prosrc AS function_body
        FROM pg_catalog.pg_trigger t
        JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
        JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
        WHERE c.relname = ANY(%s) AND NOT t.tgisinternal
        """,
        [sorted({table for table, _ in REQUIRED_TRIGGERS})],
    )
    models = {model._meta.db_table: model for model in django_apps.get_models()}
    problems = []
    for table, prefix in sorted(REQUIRED_TRIGGERS):
        matches = [t for t in installed if t["table_name"] == table and t["trigger_name"].startswith(prefix)]
        states = sorted({t["enabled"] for t in matches} - {"A"})
        expected = installed_form(models[table], prefix.removeprefix("pgtrigger_").rstrip("_"))
        as_installed = asdict(expected)
        problem = None
        if not matches:
            problem = "missing"
        elif states:
            problem = _NOT_FIRING_ALWAYS[states[0]]
        elif any({name: t[name] for name in as_installed} != as_installed for t in matches):
            problem = "changed: not the trigger its migration installs (function, events, level or condition)"
        if problem is not None:
            problems.append({"table": table, "trigger": prefix.rstrip("_"), "problem": problem})
    return problems


@register_check(invariant=7, name="idempotency_keys_unique")
def idempotency_keys_unique(scope: Scope) -> list[dict]:
    """A valid unique index guards the idempotency key, and no key appears twice."""
    index = query_rows(
        """
        SELECT i.indisvalid AS valid
        FROM pg_index i
        JOIN pg_class t ON t.oid = i.indrelid
        JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY(i.indkey)
        WHERE t.relname = 'ledger_journalentry' AND a.attname = 'idempotency_key'
          AND i.indisunique AND i.indnatts = 1
        """,
        [],
    )
    problems = []
    if not any(row["valid"] for row in index):
        problems.append({"problem": "no valid unique index on ledger_journalentry.idempotency_key"})
    problems += query_rows(
        """
        SELECT idempotency_key, count(*) AS entries, 'key applied more than once' AS problem
        FROM ledger_journalentry GROUP BY idempotency_key HAVING count(*) > 1
        ORDER BY idempotency_key LIMIT %s
        """,
        [ROW_LIMIT],
    )
    return problems


@register_check(invariant=8, name="entry_reasons_backed")
def entry_reasons_backed(scope: Scope) -> list[dict]:
    """Journal entries whose reason no app backs with a business record (invariant 8, backing: see the module).

    ``transfer``, ``hold`` and ``release`` are such reasons: no production code posts them (``transfer_create`` is
    called by the ledger benchmarks only; ``funds_hold`` and ``funds_release`` are called with the withdrawal reasons),
    and no model records a transfer between users, so an entry of one has nothing behind it. So is a reason outside
    :class:`~apps.ledger.models.EntryReason`, which only a write past the services can store.

    Reads every journal entry (a sequential scan filtered on its reason: no index leads with it), and for a
    filtered report one index lookup of its postings per offending entry.
    """
    return query_rows(
        f"""
        SELECT e.id AS entry, e.idempotency_key, e.reason, e.reference_type, e.reference_id,
               'no business record backs this reason' AS problem
        FROM ledger_journalentry e
        WHERE e.reason <> ALL(%s) AND {ENTRY_IN_SCOPE}
        ORDER BY e.id LIMIT %s
        """,
        [sorted(backed_reasons()), *scope.entry_params, ROW_LIMIT],
    )


@register_asset_figures
def ledger_figures(scope: Scope) -> dict[str, dict]:
    """Per asset: the balance of each account kind, summed over users and shards."""
    rows = query_rows(
        """
        SELECT s.code, s.decimals, a.kind, sum(a.balance) AS balance
        FROM ledger_account a JOIN ledger_asset s ON s.id = a.asset_id
        WHERE a.asset_id = ANY(%s)
        GROUP BY s.code, s.decimals, a.kind
        """,
        [scope.asset_ids],
    )
    figures: dict[str, dict] = {
        asset.code: {kind: format_amount(Decimal(0), asset.decimals) for kind in AccountKind.values}
        for asset in scope.assets
    }
    for row in rows:
        figures[row["code"]][row["kind"]] = format_amount(row["balance"], row["decimals"])
    return figures
