"""``ledger_post_entries_v1``: lock, check and write a batch of journal entries in one call (DESIGN.md section 6).

Called by :func:`apps.ledger.services.entries_post` (and so by ``entry_post``) as one statement,
one round trip. Arguments are parallel arrays: per entry (1-based ordinal ``e``) its idempotency
key, reason, reference, metadata (JSON text), payload hash and author; per leg its entry ordinal,
account and signed amount, legs in entry order. ``p_stop_at`` (or NULL) is the ordinal just past
the last entry, standing for a later entry of the caller's batch that Python already refused (bad
legs, or an earlier key reused with another payload): the batch fails there (status ``stop``)
unless an entry before it fails first.

It locks every account of the batch in id order (``FOR NO KEY UPDATE``), then finds the first
entry that fails, checking each entry in the order ``entry_post`` always has: unknown account,
amount finer than the asset's precision or legs not summing to zero per asset (``invalid``); key
already used with another payload (``conflict``); a balance reaching 10^20 (``too_large``); a user
account below zero (``insufficient``). Balances chain across the batch: entry k sees the balances
left by entries 1..k-1; an entry whose key is already posted with the same payload is a replay
and moves nothing. On a failure it writes nothing and returns one row (the entry's ordinal, the
status and, for the balance failures, the lowest account id concerned with its kind, asset code,
decimals and balance before and after the entry). Otherwise it writes every new entry, all their
postings (each with its account's balance after it) and the new balances, one statement each, and
returns one row per entry in order with status ``posted`` or ``replayed`` and the entry id.

A key inserted concurrently between the check and the write raises SQLSTATE 40001, which
``retrying_atomic`` retries (the retry sees the committed entry: a replay or a conflict).
"""

from django.db import migrations

FUNCTION = r"""
CREATE FUNCTION ledger_post_entries_v1(
    p_keys text[],
    p_reasons text[],
    p_reference_types text[],
    p_reference_ids text[],
    p_metadata text[],
    p_payload_hashes text[],
    p_created_by bigint[],
    p_created_at timestamptz,
    p_leg_entries int[],
    p_leg_accounts bigint[],
    p_leg_amounts numeric[],
    p_stop_at int
) RETURNS TABLE (
    entry_index int,
    entry_id bigint,
    status text,
    account_id bigint,
    account_kind text,
    asset_code text,
    decimals int,
    balance_before numeric,
    balance_after numeric
)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
-- Plans are made once per connection: the statements' shapes never change, only the arrays' contents.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_new int[];
    v_old int[];
    v_old_ids bigint[];
    v_old_conflict bool[];
    v_written_e int[];
    v_written_ids bigint[];
    v_failure record;
BEGIN
    PERFORM 1 FROM ledger_account a WHERE a.id = ANY(p_leg_accounts) ORDER BY a.id FOR NO KEY UPDATE;

    SELECT coalesce(array_agg(k.e ORDER BY k.e) FILTER (WHERE j.id IS NULL), '{}'),
           coalesce(array_agg(k.e ORDER BY k.e) FILTER (WHERE j.id IS NOT NULL), '{}'),
           coalesce(array_agg(j.id ORDER BY k.e) FILTER (WHERE j.id IS NOT NULL), '{}'),
           coalesce(array_agg(j.payload_hash <> k.hash ORDER BY k.e) FILTER (WHERE j.id IS NOT NULL), '{}')
    INTO v_new, v_old, v_old_ids, v_old_conflict
    FROM unnest(p_keys, p_payload_hashes) WITH ORDINALITY AS k(key, hash, e)
    LEFT JOIN (SELECT j.id, j.idempotency_key, j.payload_hash FROM ledger_journalentry j
               WHERE j.idempotency_key = ANY(p_keys)) j ON j.idempotency_key = k.key;

    WITH account AS (  -- index lookups by id (never a join the planner could turn into a scan of every account)
        SELECT a.id, a.kind, a.asset_id, a.balance, s.code, s.decimals
        FROM ledger_account a JOIN ledger_asset s ON s.id = a.asset_id
        WHERE a.id = ANY(p_leg_accounts)
    ), leg AS (
        SELECT l.e, l.account_id, l.amount, a.id IS NULL AS unknown, a.kind, a.asset_id, a.balance,
               a.code, a.decimals,
               CASE WHEN a.kind IN ('custody', 'network_fee_expense') THEN 1 ELSE -1 END AS sign
        FROM unnest(p_leg_entries, p_leg_accounts, p_leg_amounts) AS l(e, account_id, amount)
        LEFT JOIN account a ON a.id = l.account_id
    ), invalid AS (
        SELECT leg.e FROM leg GROUP BY leg.e
        HAVING bool_or(leg.unknown) OR bool_or(round(leg.amount, leg.decimals) <> leg.amount)
        UNION
        SELECT leg.e FROM leg WHERE NOT leg.unknown GROUP BY leg.e, leg.asset_id HAVING sum(leg.amount) <> 0
    ), moved AS (  -- each fresh entry's net movement per account, with the account's balance after the entry
        SELECT leg.e, leg.account_id, leg.kind, leg.code, leg.decimals,
               leg.balance + leg.sign * sum(sum(leg.amount)) OVER w AS after,
               leg.sign * sum(leg.amount) AS net
        FROM leg
        WHERE leg.e = ANY(v_new) AND NOT leg.unknown
        GROUP BY leg.e, leg.account_id, leg.kind, leg.code, leg.decimals, leg.balance, leg.sign
        WINDOW w AS (PARTITION BY leg.account_id ORDER BY leg.e)
    ), failure AS (
        SELECT i.e, 0 AS rank, 'invalid' AS status, NULL::bigint AS account_id, NULL AS kind, NULL AS code,
               NULL::int AS decimals, NULL::numeric AS before, NULL::numeric AS after
        FROM invalid i
        UNION ALL
        SELECT o.e, 1, 'conflict', NULL, NULL, NULL, NULL, NULL, NULL
        FROM unnest(v_old, v_old_conflict) AS o(e, conflict) WHERE o.conflict
        UNION ALL
        SELECT p_stop_at, 1, 'stop', NULL, NULL, NULL, NULL, NULL, NULL WHERE p_stop_at IS NOT NULL
        UNION ALL
        SELECT m.e, 2, 'too_large', m.account_id, m.kind, m.code, m.decimals, m.after - m.net, m.after
        FROM moved m WHERE abs(m.after) >= 1e20
        UNION ALL
        SELECT m.e, 3, 'insufficient', m.account_id, m.kind, m.code, m.decimals, m.after - m.net, m.after
        FROM moved m WHERE m.kind IN ('user_available', 'user_held') AND m.after < 0
    )
    SELECT * INTO v_failure FROM failure f ORDER BY f.e, f.rank, f.account_id LIMIT 1;

    IF FOUND THEN
        RETURN QUERY SELECT v_failure.e::int, NULL::bigint, v_failure.status, v_failure.account_id,
            v_failure.kind::text, v_failure.code::text, v_failure.decimals, v_failure.before, v_failure.after;
        RETURN;
    END IF;

    WITH entry AS (
        SELECT k.*
        FROM unnest(p_keys, p_reasons, p_reference_types, p_reference_ids, p_metadata, p_payload_hashes, p_created_by)
            WITH ORDINALITY AS k(key, reason, reference_type, reference_id, metadata, hash, created_by, e)
        WHERE k.e = ANY(v_new)
    ), inserted AS (
        INSERT INTO ledger_journalentry
            (idempotency_key, reason, reference_type, reference_id, metadata, payload_hash, created_at, created_by_id)
        SELECT entry.key, entry.reason, entry.reference_type, entry.reference_id, entry.metadata::jsonb,
               entry.hash, p_created_at, entry.created_by
        FROM entry ORDER BY entry.e
        ON CONFLICT (idempotency_key) DO NOTHING
        RETURNING id, idempotency_key
    ), leg AS (
        SELECT l.i, l.e, l.account_id, l.amount, a.asset_id,
               a.balance + CASE WHEN a.kind IN ('custody', 'network_fee_expense') THEN 1 ELSE -1 END
                   * sum(l.amount) OVER (PARTITION BY l.account_id ORDER BY l.i) AS balance_after,
               row_number() OVER (PARTITION BY l.account_id ORDER BY l.i DESC) = 1 AS last,
               count(*) OVER (PARTITION BY l.account_id) AS postings
        FROM unnest(p_leg_entries, p_leg_accounts, p_leg_amounts) WITH ORDINALITY AS l(e, account_id, amount, i)
        JOIN (SELECT a.id, a.kind, a.asset_id, a.balance FROM ledger_account a WHERE a.id = ANY(p_leg_accounts)) a
            ON a.id = l.account_id
        WHERE l.e = ANY(v_new)
    ), written AS (
        SELECT entry.e, inserted.id FROM entry JOIN inserted ON inserted.idempotency_key = entry.key
    ), postings AS (
        INSERT INTO ledger_posting (entry_id, account_id, asset_id, amount, balance_after)
        SELECT written.id, leg.account_id, leg.asset_id, leg.amount, leg.balance_after
        FROM leg JOIN written ON written.e = leg.e
        ORDER BY leg.i
    ), balances AS (
        UPDATE ledger_account a
        SET balance = leg.balance_after, version = a.version + leg.postings
        FROM leg
        WHERE leg.last AND a.id = leg.account_id AND a.id = ANY(p_leg_accounts)
    )
    SELECT coalesce(array_agg(written.e ORDER BY written.e), '{}'), coalesce(array_agg(written.id ORDER BY written.e), '{}')
    INTO v_written_e, v_written_ids
    FROM written;

    IF cardinality(v_written_e) <> cardinality(v_new) THEN
        RAISE EXCEPTION 'an idempotency key of this batch was posted concurrently'
            USING ERRCODE = 'serialization_failure';
    END IF;

    RETURN QUERY
        SELECT w.e::int, w.id, 'posted'::text, NULL::bigint, NULL::text, NULL::text, NULL::int, NULL::numeric, NULL::numeric
        FROM unnest(v_written_e, v_written_ids) AS w(e, id)
        UNION ALL
        SELECT o.e::int, o.id, 'replayed', NULL, NULL, NULL, NULL, NULL, NULL
        FROM unnest(v_old, v_old_ids) AS o(e, id)
        ORDER BY 1;
END;
$$
"""

DROP_FUNCTION = """
DROP FUNCTION ledger_post_entries_v1(
    text[], text[], text[], text[], text[], text[], bigint[], timestamptz, int[], bigint[], numeric[], int
)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0003_asset_display_decimals"),
    ]

    operations = [migrations.RunSQL(sql=FUNCTION, reverse_sql=DROP_FUNCTION)]
