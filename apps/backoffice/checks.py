"""The back office's part of reconciliation (DESIGN.md section 5), registered from ``BackofficeConfig.ready``.

- invariant 8, backing (see :mod:`apps.ledger.checks`): every journal entry of the reason ``adjustment`` is the
  entry of an approved manual adjustment (maker-checker, :class:`~apps.backoffice.models.Adjustment`), posting
  exactly its legs, by its approver and with its memo, so an adjustment forged past the approval, or with a real
  adjustment's reference, or rewritten afterwards (the seal's digest covers neither the memo nor who posted it:
  PROOFS.md section 1), is found.
"""

from apps.ledger.models import EntryReason
from apps.ledger.reconciliation import (
    ENTRY_IN_SCOPE,
    ROW_LIMIT,
    Scope,
    query_rows,
    register_backed_reasons,
    register_check,
)

from .models import AdjustmentStatus

register_backed_reasons(EntryReason.ADJUSTMENT)


@register_check(invariant=8, name="adjustment_entries_backed")
def adjustment_entries_backed(scope: Scope) -> list[dict]:
    """Journal entries of the reason ``adjustment`` that no approved manual adjustment backs.

    The entry must be the ``entry`` of an adjustment (``backoffice_adjustment.entry_id``, unique) that is approved,
    keyed ``adjustment:<id>`` with the reference ``adjustment``/``<id>``, and its postings must be the adjustment's
    ``legs`` (``[{"account": id, "amount": "signed decimal"}]``, amounts as ``str(Decimal)`` writes them, exponent
    included): as many, each posting one of them; its ``created_by`` the adjustment's ``decided_by`` and its
    ``metadata`` memo the adjustment's (break-it review: both were rewritten past the triggers, and nothing noticed).
    Rows: entry, key, reason, reference and the problem.

    Reads every journal entry (a sequential scan filtered on the reason); per adjustment entry one adjustment by the
    unique index on ``entry_id`` and its postings (index on ``ledger_posting.entry_id``), compared with the legs.
    Adjustments are few: operators draft and approve each by hand.
    """
    return query_rows(
        f"""
        WITH judged AS (
            SELECT e.id, e.idempotency_key, e.reason, e.reference_type, e.reference_id, a.id AS adjustment, a.status,
                   e.reference_type = 'adjustment' AND e.reference_id = a.id::text
                   AND e.idempotency_key = 'adjustment:' || a.id AS keyed,
                   e.created_by_id IS NOT DISTINCT FROM a.decided_by_id
                   AND e.metadata ->> 'memo' IS NOT DISTINCT FROM a.memo AS attributed,
                   CASE WHEN a.id IS NOT NULL THEN
                       (SELECT count(*) FROM ledger_posting p WHERE p.entry_id = e.id) = jsonb_array_length(a.legs)
                       AND NOT EXISTS (
                           SELECT 1 FROM ledger_posting p
                           WHERE p.entry_id = e.id AND NOT EXISTS (
                               SELECT 1 FROM jsonb_array_elements(a.legs) leg
                               WHERE leg ->> 'account' = p.account_id::text
                                 AND CASE WHEN leg ->> 'amount' ~ '^-?[0-9]{{1,20}}(\\.[0-9]{{1,18}})?([eE][-+]?[0-9]{{1,2}})?$'
                                          THEN (leg ->> 'amount')::numeric END = p.amount
                           )
                       )
                   END AS postings_match
            FROM ledger_journalentry e
            LEFT JOIN backoffice_adjustment a ON a.entry_id = e.id
            WHERE e.reason = %s AND {ENTRY_IN_SCOPE}
        )
        SELECT id AS entry, idempotency_key, reason, reference_type, reference_id,
               CASE
                   WHEN adjustment IS NULL THEN 'no adjustment was posted as this entry'
                   WHEN status <> %s THEN 'its adjustment is ' || status
                   WHEN NOT keyed THEN 'not the key or reference of its adjustment'
                   WHEN NOT postings_match THEN 'the postings are not the adjustment''s legs'
                   ELSE 'not posted by the adjustment''s approver with its memo'
               END AS problem
        FROM judged
        WHERE adjustment IS NULL OR status <> %s OR NOT keyed OR NOT postings_match OR NOT attributed
        ORDER BY id LIMIT %s
        """,
        [EntryReason.ADJUSTMENT, *scope.entry_params, AdjustmentStatus.APPROVED, AdjustmentStatus.APPROVED, ROW_LIMIT],
    )
