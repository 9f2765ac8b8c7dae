"""``ledger_transfer_post_v1``: a transfer between users in one call, lookups included (DESIGN.md section 6).

Called by :func:`apps.ledger.services.transfer_create` as one statement, one round trip (with the
transaction's BEGIN in the same pipeline). It does what the service did in three queries before
the posting call, then posts through ``ledger_post_entries_v1`` (migration 0004), which locks,
checks and writes as for every entry:

- the asset by ``p_asset_code`` (none: one row with status ``unknown_asset``);
- amount and fee exact multiples of the asset's precision (else status ``inexact``; the row carries
  the asset's decimals, and the service words the error as ``check_amount`` always has);
- the two users' ``user_available`` accounts and, for a positive fee, the ``fee_revenue`` account of
  shard ``p_fee_shard``, created when missing (``INSERT ... ON CONFLICT DO NOTHING`` on the unique
  constraints, as the service's ``bulk_create(ignore_conflicts=True)`` did) if ``p_create_accounts``;
  otherwise a missing account is one row with status ``missing_accounts`` and nothing is written (so a
  call that is its own transaction, in autocommit, never leaves accounts behind a refused transfer);
- the payload hash, ``SHA256`` over the JSON text the service's ``_payload_hash`` produces:
  ``p_hash_head || legs || p_hash_tail`` where Python sends the text around the legs and each leg's
  amount as ``format(amount.normalize(), "f")`` (``p_amount_texts``: source, destination, fee), and
  the legs are ``[[account id, "amount"], ...]`` sorted by account id.

It returns what ``ledger_post_entries_v1`` returns for the one entry, with the payload hash as a last column.
"""

from django.db import migrations

FUNCTION = r"""
CREATE FUNCTION ledger_transfer_post_v1(
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
AS $$
#variable_conflict use_column
DECLARE
    v_asset_id bigint;
    v_decimals int;
    v_source bigint;
    v_destination bigint;
    v_fee_account bigint;
    v_accounts bigint[];
    v_amounts numeric[];
    v_texts text[];
    v_legs text;
    v_hash text;
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
        SELECT max(a.id) FILTER (WHERE a.owner_id = p_source), max(a.id) FILTER (WHERE a.owner_id = p_destination)
        INTO v_source, v_destination
        FROM ledger_account a
        WHERE a.owner_id IN (p_source, p_destination) AND a.asset_id = v_asset_id AND a.kind = 'user_available';
        EXIT WHEN v_source IS NOT NULL AND v_destination IS NOT NULL;
        IF NOT p_create_accounts THEN
            RETURN QUERY SELECT 1, NULL::bigint, 'missing_accounts'::text, NULL::bigint, NULL::text, p_asset_code,
                v_decimals, NULL::numeric, NULL::numeric, NULL::text;
            RETURN;
        END IF;
        INSERT INTO ledger_account (kind, owner_id, asset_id, shard, balance, version, created_at)
        SELECT 'user_available', o.owner, v_asset_id, 0, 0, 0, now()
        FROM unnest(ARRAY[p_source, p_destination]) AS o(owner)
        ORDER BY o.owner
        ON CONFLICT (owner_id, asset_id, kind) WHERE owner_id IS NOT NULL DO NOTHING;
    END LOOP;

    v_accounts := ARRAY[v_source, v_destination];
    v_amounts := ARRAY[p_amount + p_fee, -p_amount];
    v_texts := p_amount_texts[1:2];
    IF p_fee > 0 THEN
        FOR attempt IN 1..2 LOOP
            SELECT a.id INTO v_fee_account FROM ledger_account a
            WHERE a.kind = 'fee_revenue' AND a.asset_id = v_asset_id AND a.shard = p_fee_shard AND a.owner_id IS NULL;
            EXIT WHEN FOUND;
            IF NOT p_create_accounts THEN
                RETURN QUERY SELECT 1, NULL::bigint, 'missing_accounts'::text, NULL::bigint, NULL::text, p_asset_code,
                    v_decimals, NULL::numeric, NULL::numeric, NULL::text;
                RETURN;
            END IF;
            INSERT INTO ledger_account (kind, owner_id, asset_id, shard, balance, version, created_at)
            VALUES ('fee_revenue', NULL, v_asset_id, p_fee_shard, 0, 0, now())
            ON CONFLICT (kind, asset_id, shard) WHERE owner_id IS NULL DO NOTHING;
        END LOOP;
        v_accounts := v_accounts || v_fee_account;
        v_amounts := v_amounts || (-p_fee);
        v_texts := v_texts || p_amount_texts[3];
    END IF;

    SELECT '[' || string_agg(format('[%s, "%s"]', l.account, l.amount_text), ', ' ORDER BY l.account) || ']'
    INTO v_legs
    FROM unnest(v_accounts, v_texts) AS l(account, amount_text);

    v_hash := encode(sha256(convert_to(p_hash_head || v_legs || p_hash_tail, 'UTF8')), 'hex');
    RETURN QUERY SELECT p.*, v_hash FROM ledger_post_entries_v1(
        ARRAY[p_key], ARRAY['transfer'], ARRAY['transfer'], ARRAY[p_reference_id], ARRAY[p_metadata], ARRAY[v_hash],
        ARRAY[p_created_by], p_created_at, array_fill(1, ARRAY[cardinality(v_accounts)]), v_accounts, v_amounts, NULL
    ) p;
END;
$$
"""

DROP_FUNCTION = """
DROP FUNCTION ledger_transfer_post_v1(
    text, text, bigint, bigint, numeric, numeric, int, text[], text, text, text, text, bigint, timestamptz, boolean
)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0005_statement_level_entry_checks"),
    ]

    operations = [migrations.RunSQL(sql=FUNCTION, reverse_sql=DROP_FUNCTION)]
