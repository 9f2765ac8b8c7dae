"""``ledger_transfer_post_v2``: a transfer between users in one call, in four statements instead of ten.

Same arguments, result and statuses as ``ledger_transfer_post_v1`` (migration 0006), which stays for
a rollback. Profiled with ``perf`` on the server backend, v1's CPU went to starting and ending the
executor for its statements (expression set-up, tuple descriptors, plan validity checks), not to
reading or writing rows: v1 ran three lookups, a text aggregate for the payload hash, then
``ledger_post_entries_v1`` (a nested call with its own settings) and its five set-based statements
built for batches (an account CTE, a window over the legs, a failure union of five arms). A single
entry of two or three legs needs none of that, so this function:

1. resolves the asset (as v1), and refuses an inexact amount or fee (``inexact``, as v1);
2. locks the two users' ``user_available`` accounts and, for a positive fee, the ``fee_revenue``
   account of shard ``p_fee_shard`` in ONE statement, in id order (``FOR NO KEY UPDATE``, as
   ``ledger_post_entries_v1`` locks every account), reading their balances as locked; a missing
   account is created (``p_create_accounts``) or reported (``missing_accounts``) as in v1;
3. hashes the payload exactly as v1 and Python's ``_payload_hash`` (legs sorted by account id, each
   ``[id, "amount"]``), with plain PL/pgSQL expressions instead of a query;
4. computes each account's balance after the entry; a balance reaching 10^20 (``too_large``) or a
   user account below zero (``insufficient``) is a failure unless the key is already posted (then a
   ``replayed`` row or a ``conflict``, the precedence ``ledger_post_entries_v1`` has);
5. writes the entry (``INSERT ... ON CONFLICT (idempotency_key) DO NOTHING``), its postings in leg
   order and the new balances in ONE statement; when the key was already taken (before the call or
   by a transaction that committed meanwhile: ON CONFLICT waits for it) nothing is written and the
   stored entry decides: the same payload hash is a ``replayed`` row, another a ``conflict``.

The database's own checks are untouched and still run on every row this writes: the statement-level
triggers (two or more postings per entry, balanced per asset, exact amounts), the CHECK constraints
(non-negative user balances, non-zero postings), the foreign keys, the unique idempotency key and the
append-only triggers.
"""

from django.db import migrations

FUNCTION = r"""
CREATE FUNCTION ledger_transfer_post_v2(
    p_key text,
    p_asset_code text,
    p_source bigint,
    p_destination bigint,
    p_amount numeric,
    p_fee numeric,
    p_fee_shard int,
    p_amount_texts text[],
    p_reference_id text,
    p_metadata text,
    p_hash_head text,
    p_hash_tail text,
    p_created_by bigint,
    p_created_at timestamptz,
    p_create_accounts boolean
) RETURNS TABLE (
    entry_index int,
    entry_id bigint,
    status text,
    account_id bigint,
    account_kind text,
    asset_code text,
    decimals int,
    balance_before numeric,
    balance_after numeric,
    payload_hash text
)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_asset_id bigint;
    v_decimals int;
    v_fee_shard int := CASE WHEN p_fee > 0 THEN p_fee_shard END;  -- NULL: no fee leg, no fee account
    v_source bigint;
    v_destination bigint;
    v_fee_account bigint;
    v_source_before numeric;
    v_destination_before numeric;
    v_fee_before numeric;
    v_source_after numeric;
    v_destination_after numeric;
    v_fee_after numeric;
    v_ids bigint[];
    v_texts text[];
    v_swap_id bigint;
    v_swap_text text;
    v_hash text;
    v_entry bigint;
    v_stored_hash text;
    v_failure record;
BEGIN
    SELECT s.id, s.decimals INTO v_asset_id, v_decimals FROM ledger_asset s WHERE s.code = p_asset_code;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 1, NULL::bigint, 'unknown_asset'::text, NULL::bigint, NULL::text, p_asset_code,
            NULL::int, NULL::numeric, NULL::numeric, NULL::text;
        RETURN;
    END IF;
    IF round(p_amount, v_decimals) <> p_amount OR round(p_fee, v_decimals) <> p_fee THEN
        RETURN QUERY SELECT 1, NULL::bigint, 'inexact'::text, NULL::bigint, NULL::text, p_asset_code,
            v_decimals, NULL::numeric, NULL::numeric, NULL::text;
        RETURN;
    END IF;

    FOR attempt IN 1..2 LOOP
        -- Every account of the entry locked at once, in id order (as ledger_post_entries_v1 locks them).
        SELECT max(l.id) FILTER (WHERE l.owner_id = p_source),
               max(l.balance) FILTER (WHERE l.owner_id = p_source),
               max(l.id) FILTER (WHERE l.owner_id = p_destination),
               max(l.balance) FILTER (WHERE l.owner_id = p_destination),
               max(l.id) FILTER (WHERE l.owner_id IS NULL),
               max(l.balance) FILTER (WHERE l.owner_id IS NULL)
        INTO v_source, v_source_before, v_destination, v_destination_before, v_fee_account, v_fee_before
        FROM (
            SELECT a.id, a.owner_id, a.balance FROM ledger_account a
            WHERE (a.owner_id IN (p_source, p_destination) AND a.asset_id = v_asset_id AND a.kind = 'user_available')
               OR (a.kind = 'fee_revenue' AND a.asset_id = v_asset_id AND a.shard = v_fee_shard AND a.owner_id IS NULL)
            ORDER BY a.id
            FOR NO KEY UPDATE
        ) l;
        EXIT WHEN v_source IS NOT NULL AND v_destination IS NOT NULL
            AND (v_fee_shard IS NULL OR v_fee_account IS NOT NULL);
        IF NOT p_create_accounts OR attempt = 2 THEN
            RETURN QUERY SELECT 1, NULL::bigint, 'missing_accounts'::text, NULL::bigint, NULL::text, p_asset_code,
                v_decimals, NULL::numeric, NULL::numeric, NULL::text;
            RETURN;
        END IF;
        INSERT INTO ledger_account (kind, owner_id, asset_id, shard, balance, version, created_at)
        SELECT 'user_available', o.owner, v_asset_id, 0, 0, 0, now()
        FROM unnest(ARRAY[p_source, p_destination]) AS o(owner)
        ORDER BY o.owner
        ON CONFLICT (owner_id, asset_id, kind) WHERE owner_id IS NOT NULL DO NOTHING;
        IF v_fee_shard IS NOT NULL THEN
            INSERT INTO ledger_account (kind, owner_id, asset_id, shard, balance, version, created_at)
            VALUES ('fee_revenue', NULL, v_asset_id, v_fee_shard, 0, 0, now())
            ON CONFLICT (kind, asset_id, shard) WHERE owner_id IS NULL DO NOTHING;
        END IF;
    END LOOP;

    -- The payload hash: legs [[account id, "amount"], ...] sorted by account id, as v1 and _payload_hash.
    v_ids := ARRAY[v_source, v_destination];
    v_texts := p_amount_texts[1:2];
    IF v_fee_account IS NOT NULL THEN
        v_ids := v_ids || v_fee_account;
        v_texts := v_texts || p_amount_texts[3];
    END IF;
    FOR i IN REVERSE cardinality(v_ids) - 1..1 LOOP  -- bubble sort of two or three legs
        FOR j IN 1..i LOOP
            IF v_ids[j] > v_ids[j + 1] THEN
                v_swap_id := v_ids[j]; v_ids[j] := v_ids[j + 1]; v_ids[j + 1] := v_swap_id;
                v_swap_text := v_texts[j]; v_texts[j] := v_texts[j + 1]; v_texts[j + 1] := v_swap_text;
            END IF;
        END LOOP;
    END LOOP;
    v_hash := format('[%s, "%s"], [%s, "%s"]', v_ids[1], v_texts[1], v_ids[2], v_texts[2]);
    IF cardinality(v_ids) = 3 THEN
        v_hash := v_hash || format(', [%s, "%s"]', v_ids[3], v_texts[3]);
    END IF;
    v_hash := encode(sha256(convert_to(p_hash_head || '[' || v_hash || ']' || p_hash_tail, 'UTF8')), 'hex');

    -- Balances after the entry (user accounts and fee revenue are credit-normal: a debit lowers them).
    v_source_after := v_source_before - (p_amount + p_fee);
    v_destination_after := v_destination_before + p_amount;
    v_fee_after := v_fee_before + p_fee;

    IF v_source_after >= 0 AND v_destination_after >= 0 AND v_source_after < 1e20 AND v_destination_after < 1e20
       AND (v_fee_account IS NULL OR abs(v_fee_after) < 1e20) THEN
        WITH entry AS (
            INSERT INTO ledger_journalentry
                (idempotency_key, reason, reference_type, reference_id, metadata, payload_hash, created_at, created_by_id)
            VALUES (p_key, 'transfer', 'transfer', p_reference_id, p_metadata::jsonb, v_hash, p_created_at, p_created_by)
            ON CONFLICT (idempotency_key) DO NOTHING
            RETURNING id
        ), postings AS (
            INSERT INTO ledger_posting (entry_id, account_id, asset_id, amount, balance_after)
            SELECT entry.id, l.account_id, v_asset_id, l.amount, l.after
            FROM entry, (VALUES (1, v_source, p_amount + p_fee, v_source_after),
                                (2, v_destination, -p_amount, v_destination_after),
                                (3, v_fee_account, -p_fee, v_fee_after)) AS l(i, account_id, amount, after)
            WHERE l.account_id IS NOT NULL
            ORDER BY l.i
        ), balances AS (
            UPDATE ledger_account a
            SET balance = CASE a.id WHEN v_source THEN v_source_after WHEN v_destination THEN v_destination_after
                                    ELSE v_fee_after END,
                version = a.version + 1
            FROM entry
            WHERE a.id IN (v_source, v_destination, v_fee_account)
        )
        SELECT entry.id INTO v_entry FROM entry;
        IF v_entry IS NOT NULL THEN
            RETURN QUERY SELECT 1, v_entry, 'posted'::text, NULL::bigint, NULL::text, NULL::text, NULL::int,
                NULL::numeric, NULL::numeric, v_hash;
            RETURN;
        END IF;
    END IF;

    -- The key is already posted, or a balance check failed: the stored entry (if any) decides first.
    SELECT j.id, j.payload_hash INTO v_entry, v_stored_hash FROM ledger_journalentry j WHERE j.idempotency_key = p_key;
    IF v_entry IS NOT NULL THEN
        RETURN QUERY SELECT 1, CASE WHEN v_stored_hash = v_hash THEN v_entry END,
            CASE WHEN v_stored_hash = v_hash THEN 'replayed' ELSE 'conflict' END, NULL::bigint, NULL::text,
            NULL::text, NULL::int, NULL::numeric, NULL::numeric, v_hash;
        RETURN;
    END IF;
    SELECT * INTO v_failure FROM (
        SELECT 2 AS rank, 'too_large' AS status, l.id, l.kind, l.before, l.after
        FROM (VALUES (v_source, 'user_available', v_source_before, v_source_after),
                     (v_destination, 'user_available', v_destination_before, v_destination_after),
                     (v_fee_account, 'fee_revenue', v_fee_before, v_fee_after)) AS l(id, kind, before, after)
        WHERE l.id IS NOT NULL AND abs(l.after) >= 1e20
        UNION ALL
        SELECT 3, 'insufficient', l.id, 'user_available', l.before, l.after
        FROM (VALUES (v_source, v_source_before, v_source_after),
                     (v_destination, v_destination_before, v_destination_after)) AS l(id, before, after)
        WHERE l.after < 0
    ) f ORDER BY f.rank, f.id LIMIT 1;
    IF NOT FOUND THEN  -- the checks passed, yet the insert found the key taken and the read does not see it
        RAISE EXCEPTION 'the idempotency key % was posted concurrently', p_key USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN QUERY SELECT 1, NULL::bigint, v_failure.status::text, v_failure.id, v_failure.kind::text, p_asset_code,
        v_decimals, v_failure.before, v_failure.after, v_hash;
END;
$$
"""

DROP_FUNCTION = """
DROP FUNCTION ledger_transfer_post_v2(
    text, text, bigint, bigint, numeric, numeric, int, text[], text, text, text, text, bigint, timestamptz, boolean
)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0007_posting_functions_index_scans"),
    ]

    operations = [migrations.RunSQL(sql=FUNCTION, reverse_sql=DROP_FUNCTION)]
