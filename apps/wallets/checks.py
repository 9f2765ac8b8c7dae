"""The wallets' part of reconciliation (DESIGN.md section 5), registered from ``WalletsConfig.ready``.

- invariant 4: pending withdrawals are a hold source (their remaining holds explain held funds);
- invariant 5: per asset, the ledger's custody balance equals what the custody provider reports;
- invariant 8: a deposit is credited at most once (and a credited one exactly once); a withdrawal
  is completed or released exactly once when it has ended, and neither while pending.

Each check returns the offending rows; amounts are strings at the asset's precision.
"""

from decimal import Decimal

from django.db.models import Sum

from apps.ledger.amounts import format_amount, is_exact
from apps.ledger.models import Account, AccountKind
from apps.ledger.reconciliation import (
    ROW_LIMIT,
    Scope,
    query_rows,
    register_asset_figures,
    register_check,
    register_hold_source,
)

from . import selectors
from .custody import get_adapter
from .custody.base import CustodyError
from .models import WITHDRAWAL_FINAL, WithdrawalStatus


def _format(value: Decimal, decimals: int) -> str:
    return format_amount(value, decimals) if is_exact(value, decimals) else f"{value:f}"


@register_hold_source
def pending_withdrawal_holds(scope: Scope) -> dict[tuple[int, int], Decimal]:
    """Invariant 4: what pending withdrawals (requested ... submitted) still hold, per user and asset."""
    return selectors.withdrawal_holds(asset_ids=scope.asset_ids)


def _ledger_custody(scope: Scope) -> dict[int, Decimal]:
    rows = (
        Account.objects.filter(kind=AccountKind.CUSTODY, asset_id__in=scope.asset_ids)
        .values("asset_id")
        .annotate(total=Sum("balance"))
    )
    return {row["asset_id"]: row["total"] for row in rows}


@register_check(invariant=5, name="custody_matches_provider")
def custody_matches_provider(scope: Scope) -> list[dict]:
    """Per asset, the ledger's ``custody`` balance (all shards) equals the custody adapter's reported holdings."""
    try:
        reported = get_adapter().holdings()
    except CustodyError as exc:
        return [{"asset": None, "problem": f"the custody provider did not report its holdings: {exc}"}]
    ledger = _ledger_custody(scope)
    problems: list[dict[str, str | None]] = []
    for asset in scope.assets:
        ours = ledger.get(asset.id, Decimal(0))
        theirs = reported.get(asset.code, Decimal(0))
        if ours != theirs:
            problems.append(
                {
                    "asset": asset.code,
                    "ledger_custody": _format(ours, asset.decimals),
                    "custody_reported": _format(theirs, asset.decimals),
                    "difference": _format(ours - theirs, asset.decimals),
                }
            )
    if not scope.filtered:
        listed = {asset.code for asset in scope.assets}
        for code, amount in sorted(reported.items()):
            if code not in listed and amount:
                problems.append(
                    {
                        "asset": code,
                        "ledger_custody": None,
                        "custody_reported": f"{amount:f}",
                        "problem": "held by custody, unknown to the ledger",
                    }
                )
    return problems


@register_asset_figures
def custody_figures(scope: Scope) -> dict[str, dict]:
    """Per asset: ``custody_reported``, the holdings the custody provider reports."""
    try:
        reported = get_adapter().holdings()
    except CustodyError:
        return {}
    return {
        asset.code: {"custody_reported": _format(reported.get(asset.code, Decimal(0)), asset.decimals)}
        for asset in scope.assets
    }


@register_check(invariant=8, name="deposits_credited_once")
def deposits_credited_once(scope: Scope) -> list[dict]:
    """Credited deposits have their one entry (key ``deposit:<network>:<txid>:<vout>``), crediting the owner's
    available funds with the deposit's amount; other deposits have none; no deposit entry lacks its deposit."""
    problems = query_rows(
        """
        SELECT d.id AS deposit, s.code AS asset, d.status, d.entry_id AS recorded_entry, e.id AS keyed_entry,
               CASE
                 WHEN d.status = 'credited' AND e.id IS NULL THEN 'credited without its entry'
                 WHEN d.status = 'credited' AND e.id <> d.entry_id THEN 'recorded entry is not the keyed entry'
                 WHEN d.status <> 'credited' AND e.id IS NOT NULL THEN 'entry posted but deposit not credited'
                 ELSE 'credit does not match the deposit'
               END AS problem
        FROM wallets_deposit d
        JOIN ledger_asset s ON s.id = d.asset_id
        LEFT JOIN ledger_journalentry e ON e.idempotency_key = 'deposit:' || d.network || ':' || d.txid || ':' || d.vout
        WHERE d.asset_id = ANY(%s) AND (
            (d.status = 'credited' AND (e.id IS NULL OR e.id <> d.entry_id OR NOT EXISTS (
                SELECT 1 FROM ledger_posting p JOIN ledger_account a ON a.id = p.account_id
                WHERE p.entry_id = e.id AND a.kind = 'user_available' AND a.owner_id = d.user_id
                  AND a.asset_id = d.asset_id AND p.amount = -d.amount)))
            OR (d.status <> 'credited' AND e.id IS NOT NULL)
        )
        ORDER BY d.id LIMIT %s
        """,
        [scope.asset_ids, ROW_LIMIT],
    )
    problems += query_rows(
        """
        SELECT e.id AS entry, e.idempotency_key, e.reference_id AS deposit,
               'deposit entry without a credited deposit' AS problem
        FROM ledger_journalentry e
        WHERE e.reference_type = 'deposit'
          AND NOT EXISTS (SELECT 1 FROM wallets_deposit d WHERE d.entry_id = e.id AND d.status = 'credited')
          AND EXISTS (SELECT 1 FROM ledger_posting p WHERE p.entry_id = e.id AND p.asset_id = ANY(%s))
        ORDER BY e.id LIMIT %s
        """,
        [scope.asset_ids, ROW_LIMIT],
    )
    return problems


@register_check(invariant=8, name="withdrawals_ended_once")
def withdrawals_ended_once(scope: Scope) -> list[dict]:
    """Each withdrawal has its hold entry; a completed one its complete entry and no release, a rejected,
    cancelled or failed one its release and no complete entry, a pending one neither; and no withdrawal
    entry lacks its withdrawal."""
    rows = query_rows(
        """
        SELECT w.id AS withdrawal, s.code AS asset, w.status,
               h.id AS hold_entry, c.id AS complete_entry, r.id AS release_entry
        FROM wallets_withdrawal w
        JOIN ledger_asset s ON s.id = w.asset_id
        LEFT JOIN ledger_journalentry h ON h.idempotency_key = 'withdrawal:' || w.id || ':hold'
        LEFT JOIN ledger_journalentry c ON c.idempotency_key = 'withdrawal:' || w.id || ':complete'
        LEFT JOIN ledger_journalentry r ON r.idempotency_key = 'withdrawal:' || w.id || ':release'
        WHERE w.asset_id = ANY(%s) AND NOT (
            h.id IS NOT NULL AND CASE
                WHEN w.status = 'completed' THEN c.id IS NOT NULL AND r.id IS NULL
                WHEN w.status = ANY(%s) THEN r.id IS NOT NULL AND c.id IS NULL
                ELSE c.id IS NULL AND r.id IS NULL
            END
        )
        ORDER BY w.id LIMIT %s
        """,
        [scope.asset_ids, [s for s in WITHDRAWAL_FINAL if s != WithdrawalStatus.COMPLETED], ROW_LIMIT],
    )
    for row in rows:
        if row["hold_entry"] is None:
            row["problem"] = "no hold entry"
        elif row["complete_entry"] and row["release_entry"]:
            row["problem"] = "both completed and released"
        elif row["status"] == WithdrawalStatus.COMPLETED:
            row["problem"] = "completed without its complete entry" if not row["complete_entry"] else "released"
        elif row["status"] in WITHDRAWAL_FINAL:
            row["problem"] = "ended without its release" if not row["release_entry"] else "completed"
        else:
            row["problem"] = "pending but already completed or released"
    rows += query_rows(
        """
        SELECT e.id AS entry, e.idempotency_key, e.reference_id AS withdrawal,
               'withdrawal entry without its withdrawal' AS problem
        FROM ledger_journalentry e
        WHERE e.reference_type = 'withdrawal'
          AND NOT EXISTS (SELECT 1 FROM wallets_withdrawal w WHERE w.id::text = e.reference_id)
          AND EXISTS (SELECT 1 FROM ledger_posting p WHERE p.entry_id = e.id AND p.asset_id = ANY(%s))
        ORDER BY e.id LIMIT %s
        """,
        [scope.asset_ids, ROW_LIMIT],
    )
    return rows
