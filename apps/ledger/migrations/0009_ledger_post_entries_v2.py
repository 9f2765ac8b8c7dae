"""``ledger_post_entries_v2``: ``ledger_post_entries_v1`` (migration 0004) without the per-row index rescans.

Same arguments, result, statuses, checks and their order as v1 (its docstring describes them), which
stays for a rollback. Profiled with ``perf`` on a backend posting batches of 100 transfers, a third
of v1's CPU went to index rescans: its later statements reached the accounts by
``a.id = ANY(p_leg_accounts)`` joined to the legs, and in a nested loop each of the 200 legs rescanned
the index with the whole array, which PostgreSQL sorts and deduplicates again on every rescan
(``_bt_preprocess_array_keys``, ``qsort_arg``); the idempotency lookup did the same with the keys.
v2 reads each table once per call with one array:

1. the lock statement (``FOR NO KEY UPDATE OF`` the accounts, in id order, as v1) also reads every
   locked account's kind, asset, balance and precision into arrays;
2. the stored keys are read once (``idempotency_key = ANY(p_keys)``) into arrays;
3. the checks and the write join the legs to those arrays (``unnest``), not to the tables, and the
   balances are written by ``id = ANY(the batch's accounts)`` with each new balance looked up in an
   array computed by the same statement's legs, so no statement joins a table to the legs.

The balances read in step 1 are the ones v1's later statements read: every account is locked by then
and only this call changes it. Entry and postings are still written in one statement, so the
statement-level triggers, the CHECK constraints, the foreign keys and the unique key check every row.
"""

from django.db import migrations

FUNCTION = r"""
CREATE FUNCTION ledger_post_entries_v2(
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
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_ids bigint[];
    v_kinds text[];
    v_assets bigint[];
    v_balances numeric[];
    v_codes text[];
    v_decimals int[];
    v_found_keys text[];
    v_found_ids bigint[];
    v_found_hashes text[];
    v_new int[];
    v_old int[];
    v_old_ids bigint[];
    v_old_conflict bool[];
    v_written_e int[];
    v_written_ids bigint[];
    v_failure record;
BEGIN
    SELECT coalesce(array_agg(l.id ORDER BY l.id), '{}'), array_agg(l.kind ORDER BY l.id),
           array_agg(l.asset_id ORDER BY l.id), array_agg(l.balance ORDER BY l.id),
           array_agg(l.code ORDER BY l.id), array_agg(l.decimals ORDER BY l.id)
    INTO v_ids, v_kinds, v_assets, v_balances, v_codes, v_decimals
    FROM (
        SELECT a.id, a.kind, a.asset_id, a.balance, s.code, s.decimals
        FROM ledger_account a JOIN ledger_asset s ON s.id = a.asset_id
        WHERE a.id = ANY(p_leg_accounts)
        ORDER BY a.id
        FOR NO KEY UPDATE OF a
    ) l;

    SELECT array_agg(j.idempotency_key), array_agg(j.id), array_agg(j.payload_hash)
    INTO v_found_keys, v_found_ids, v_found_hashes
    FROM ledger_journalentry j WHERE j.idempotency_key = ANY(p_keys);

    SELECT coalesce(array_agg(k.e ORDER BY k.e) FILTER (WHERE j.id IS NULL), '{}'),
           coalesce(array_agg(k.e ORDER BY k.e) FILTER (WHERE j.id IS NOT NULL), '{}'),
           coalesce(array_agg(j.id ORDER BY k.e) FILTER (WHERE j.id IS NOT NULL), '{}'),
           coalesce(array_agg(j.hash <> k.hash ORDER BY k.e) FILTER (WHERE j.id IS NOT NULL), '{}')
    INTO v_new, v_old, v_old_ids, v_old_conflict
    FROM unnest(p_keys, p_payload_hashes) WITH ORDINALITY AS k(key, hash, e)
    LEFT JOIN unnest(v_found_keys, v_found_ids, v_found_hashes) AS j(key, id, hash) ON j.key = k.key;

    WITH account AS (  -- the locked accounts, as read by the lock
        SELECT * FROM unnest(v_ids, v_kinds, v_assets, v_balances, v_codes, v_decimals)
            AS a(id, kind, asset_id, balance, code, decimals)
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
        WHERE NOT (leg.e = ANY(v_old)) AND NOT leg.unknown
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
        WHERE NOT (k.e = ANY(v_old))
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
        JOIN unnest(v_ids, v_kinds, v_assets, v_balances) AS a(id, kind, asset_id, balance) ON a.id = l.account_id
        WHERE NOT (l.e = ANY(v_old))
    ), final AS (  -- each account's new balance and posting count, in arrays the UPDATE looks up by id
        SELECT array_agg(leg.account_id) AS ids, array_agg(leg.balance_after) AS balances,
               array_agg(leg.postings) AS postings
        FROM leg WHERE leg.last
    ), written AS (
        SELECT entry.e, inserted.id FROM entry JOIN inserted ON inserted.idempotency_key = entry.key
    ), postings AS (
        INSERT INTO ledger_posting (entry_id, account_id, asset_id, amount, balance_after)
        SELECT written.id, leg.account_id, leg.asset_id, leg.amount, leg.balance_after
        FROM leg JOIN written ON written.e = leg.e
        ORDER BY leg.i
    ), balances AS (
        UPDATE ledger_account a
        SET balance = f.balances[array_position(f.ids, a.id)],
            version = a.version + f.postings[array_position(f.ids, a.id)]
        FROM final f
        WHERE a.id = ANY(v_ids) AND a.id = ANY(f.ids)
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
DROP FUNCTION ledger_post_entries_v2(
    text[], text[], text[], text[], text[], text[], bigint[], timestamptz, int[], bigint[], numeric[], int
)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0008_ledger_transfer_post_v2"),
    ]

    operations = [migrations.RunSQL(sql=FUNCTION, reverse_sql=DROP_FUNCTION)]
