"""The wallets' part of reconciliation (DESIGN.md section 5), registered from ``WalletsConfig.ready``.

- invariant 4: pending withdrawals are a hold source (their remaining holds explain held funds);
- invariant 5: per asset, the ledger's custody balance, less what is in flight between the two (withdrawals custody
  has sent and the ledger not yet completed, confirmed deposits not yet credited), equals what the custody provider
  reports;
- invariant 8: a deposit is credited at most once (and a credited one exactly once); a withdrawal
  is completed or released exactly once when it has ended, and neither while pending;
- invariant 8, backing (see :mod:`apps.ledger.checks`): every journal entry of a deposit or withdrawal reason is
  the entry its deposit or withdrawal's recipe posted (DESIGN.md section 4), so an entry forged with a made-up or
  a real deposit's or withdrawal's reference is found.

Each check returns the offending rows; amounts are strings at the asset's precision.
"""

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Sum

from apps.ledger.amounts import format_as_stored
from apps.ledger.models import Account, AccountKind, EntryReason
from apps.ledger.reconciliation import (
    ENTRY_IN_SCOPE,
    REFERENCE_NUMBER,
    ROW_LIMIT,
    Scope,
    query_rows,
    register_asset_figures,
    register_backed_reasons,
    register_check,
    register_hold_source,
)

from . import selectors
from .custody import get_adapter
from .custody.base import CustodyError
from .models import WITHDRAWAL_FINAL, WITHDRAWAL_RELEASED, DepositStatus, WithdrawalStatus

WITHDRAWAL_REASONS = (
    EntryReason.WITHDRAWAL_HOLD,
    EntryReason.WITHDRAWAL_COMPLETE,
    EntryReason.WITHDRAWAL_RELEASE,
    EntryReason.NETWORK_FEE,
)
register_backed_reasons(EntryReason.DEPOSIT, *WITHDRAWAL_REASONS)


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


@dataclass(frozen=True)
class CustodyView:
    """What the custody provider reports (``reported``: holdings by asset code) and, per asset id, what its holdings
    reflect that the ledger's custody balance does not yet (``in_flight``): the amount and network fee of each
    pending withdrawal custody reports sent or sending (accepted or completed: it left custody's wallet when custody
    accepted it, the ledger's custody at its completion callback), less the deposits custody counts and the ledger not
    yet (:func:`apps.wallets.selectors.deposits_in_flight`: custody counts a deposit from its first report, the
    ledger at the asset's confirmations)."""

    reported: dict[str, Decimal]
    in_flight: dict[int, Decimal]


def custody_view(scope: Scope) -> CustodyView:
    """The provider's holdings and the in-flight amounts of ``scope``'s assets (see :class:`CustodyView`).

    Break-it review: invariant 5 compared the two raw figures and failed whenever a withdrawal was in flight (for the
    simulator's few seconds; a real provider's minutes), so the hourly run failed on healthy books. The holdings are
    read first: a withdrawal handed over after that read is counted only if custody has it by the time it is asked,
    a window of the moment custody accepts it. Raises :class:`CustodyError` (the provider did not answer)."""
    adapter = get_adapter()
    reported = adapter.holdings()
    in_flight: dict[int, Decimal] = {}
    for withdrawal_id, asset_id in selectors.withdrawals_at_custody(asset_ids=scope.asset_ids):
        at_custody = adapter.withdrawal_status(withdrawal_id=str(withdrawal_id))
        if at_custody is not None and at_custody.status != "failed":  # a failed one's coins are back at custody
            in_flight[asset_id] = in_flight.get(asset_id, Decimal(0)) + at_custody.amount + at_custody.network_fee
    for asset_id, amount in selectors.deposits_in_flight(asset_ids=scope.asset_ids).items():
        in_flight[asset_id] = in_flight.get(asset_id, Decimal(0)) + amount
    return CustodyView(reported, in_flight)


@register_check(invariant=5, name="custody_matches_provider")
def custody_matches_provider(scope: Scope) -> list[dict]:
    """Per asset, the ledger's ``custody`` balance (all shards), less what is in flight (:func:`custody_view`), equals
    the custody adapter's reported holdings."""
    try:
        view = custody_view(scope)
    except CustodyError as exc:
        return [{"asset": None, "problem": f"the custody provider did not report its holdings: {exc}"}]
    ledger = _ledger_custody(scope)
    problems: list[dict[str, str | None]] = []
    for asset in scope.assets:
        ours = ledger.get(asset.id, Decimal(0))
        in_flight = view.in_flight.get(asset.id, Decimal(0))
        theirs = view.reported.get(asset.code, Decimal(0))
        if ours - in_flight != theirs:
            problems.append(
                {
                    "asset": asset.code,
                    "ledger_custody": format_as_stored(ours, asset.decimals),
                    "in_flight": format_as_stored(in_flight, asset.decimals),
                    "custody_reported": format_as_stored(theirs, asset.decimals),
                    "difference": format_as_stored(ours - in_flight - theirs, asset.decimals),
                }
            )
    if not scope.filtered:
        listed = {asset.code for asset in scope.assets}
        for code, amount in sorted(view.reported.items()):
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
    """Per asset: ``custody_reported``, the holdings the custody provider reports, and ``custody_in_flight``, what its
    holdings reflect that the ledger's custody does not yet (:func:`custody_view`)."""
    try:
        view = custody_view(scope)
    except CustodyError:
        return {}
    return {
        asset.code: {
            "custody_reported": format_as_stored(view.reported.get(asset.code, Decimal(0)), asset.decimals),
            "custody_in_flight": format_as_stored(view.in_flight.get(asset.id, Decimal(0)), asset.decimals),
        }
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


@register_check(invariant=8, name="wallet_entries_backed")
def wallet_entries_backed(scope: Scope) -> list[dict]:
    """Journal entries of a deposit or withdrawal reason that no deposit or withdrawal backs.

    A ``deposit`` entry must be the ``entry`` of a credited deposit (``wallets_deposit.entry_id``, unique), keyed
    ``deposit:<network>:<txid>:<vout>`` with the reference ``deposit``/``<deposit id>``, and post exactly its credit:
    Dr custody and Cr the owner's available funds, each by the deposit's amount of its asset.

    A withdrawal entry must name an existing withdrawal (reference ``withdrawal``/``<id>``) under the key of its
    step (``withdrawal:<id>:hold|complete|release|network-fee``), the withdrawal must be in a state that step
    leads to (``withdrawal_hold``: any, every withdrawal is held once; ``withdrawal_complete``: completed;
    ``withdrawal_release``: rejected, cancelled, failed or expired; ``network_fee``: completed, with that network
    fee), and every posting must be the step's leg on the asset of the withdrawal (``A`` its amount, ``F`` its
    fee, ``N`` its network fee): hold Dr the owner's available / Cr held ``A+F``; complete Dr the owner's held
    ``A+F`` / Cr custody ``A`` / Cr fee revenue ``F``; release Dr held / Cr available ``A+F``; network fee Dr
    network fee expense / Cr custody ``N``. Rows: entry, key, reason, reference and the problem.

    Reads every journal entry (a sequential scan filtered on the five reasons); per entry one deposit by the unique
    index on ``wallets_deposit.entry_id`` or one withdrawal by primary key, then its two or three postings (index
    on ``ledger_posting.entry_id``) with their accounts by primary key.
    """
    return query_rows(
        f"""
        WITH judged AS (
            SELECT e.id, e.idempotency_key, e.reason, e.reference_type, e.reference_id, d.id AS deposit, d.status,
                   w.id AS withdrawal, w.status AS withdrawal_status,
                   CASE WHEN d.id IS NOT NULL
                       THEN e.reference_type = 'deposit' AND e.reference_id = d.id::text
                            AND e.idempotency_key = 'deposit:' || d.network || ':' || d.txid || ':' || d.vout
                       ELSE e.reference_type = 'withdrawal'
                            AND e.idempotency_key = 'withdrawal:' || w.id || ':' || CASE e.reason
                                WHEN 'withdrawal_hold' THEN 'hold' WHEN 'withdrawal_complete' THEN 'complete'
                                WHEN 'withdrawal_release' THEN 'release' ELSE 'network-fee' END
                   END AS keyed,
                   CASE e.reason
                       WHEN 'deposit' THEN d.status = %s
                       WHEN 'withdrawal_hold' THEN true
                       WHEN 'withdrawal_complete' THEN w.status = %s
                       WHEN 'withdrawal_release' THEN w.status = ANY(%s)
                       ELSE w.status = %s AND w.network_fee > 0
                   END AS in_state,
                   CASE WHEN d.id IS NOT NULL OR w.id IS NOT NULL THEN NOT EXISTS (
                       SELECT 1 FROM ledger_posting p JOIN ledger_account a ON a.id = p.account_id
                       WHERE p.entry_id = e.id AND (
                           p.asset_id = COALESCE(d.asset_id, w.asset_id)
                           AND CASE e.reason
                               WHEN 'deposit' THEN (a.kind = 'custody' AND p.amount = d.amount)
                                   OR (a.kind = 'user_available' AND a.owner_id = d.user_id AND p.amount = -d.amount)
                               WHEN 'withdrawal_hold' THEN a.owner_id = w.user_id
                                   AND ((a.kind = 'user_available' AND p.amount = w.amount + w.fee)
                                        OR (a.kind = 'user_held' AND p.amount = -(w.amount + w.fee)))
                               WHEN 'withdrawal_complete' THEN
                                   (a.kind = 'user_held' AND a.owner_id = w.user_id AND p.amount = w.amount + w.fee)
                                   OR (a.kind = 'custody' AND p.amount = -w.amount)
                                   OR (a.kind = 'fee_revenue' AND p.amount = -w.fee)
                               WHEN 'withdrawal_release' THEN a.owner_id = w.user_id
                                   AND ((a.kind = 'user_held' AND p.amount = w.amount + w.fee)
                                        OR (a.kind = 'user_available' AND p.amount = -(w.amount + w.fee)))
                               ELSE (a.kind = 'network_fee_expense' AND p.amount = w.network_fee)
                                   OR (a.kind = 'custody' AND p.amount = -w.network_fee)
                           END
                       ) IS NOT TRUE
                   ) END AS postings_match
            FROM ledger_journalentry e
            LEFT JOIN wallets_deposit d ON e.reason = 'deposit' AND d.entry_id = e.id
            LEFT JOIN wallets_withdrawal w ON e.reason <> 'deposit' AND w.id = {REFERENCE_NUMBER}
            WHERE e.reason = ANY(%s) AND {ENTRY_IN_SCOPE}
        )
        SELECT id AS entry, idempotency_key, reason, reference_type, reference_id,
               CASE
                   WHEN reason = 'deposit' AND deposit IS NULL THEN 'no deposit is credited by this entry'
                   WHEN reason <> 'deposit' AND withdrawal IS NULL THEN 'no such withdrawal'
                   WHEN NOT keyed THEN 'not the key or reference of its ' || CASE WHEN deposit IS NULL
                                       THEN 'withdrawal''s step' ELSE 'deposit' END
                   WHEN NOT in_state THEN 'its ' || CASE WHEN deposit IS NULL THEN 'withdrawal' ELSE 'deposit' END
                                          || ' is ' || COALESCE(status, withdrawal_status)
                   ELSE 'a posting is not its recipe''s leg'
               END AS problem
        FROM judged
        WHERE (deposit IS NULL AND withdrawal IS NULL) OR NOT keyed OR NOT in_state OR NOT postings_match
        ORDER BY id LIMIT %s
        """,
        [
            DepositStatus.CREDITED,
            WithdrawalStatus.COMPLETED,
            list(WITHDRAWAL_RELEASED),
            WithdrawalStatus.COMPLETED,
            [EntryReason.DEPOSIT, *WITHDRAWAL_REASONS],
            *scope.entry_params,
            ROW_LIMIT,
        ],
    )
