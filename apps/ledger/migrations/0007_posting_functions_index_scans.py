"""The posting functions plan index scans whatever the tables' statistics say; the unused reference index goes.

``ledger_post_entries_v1`` and ``ledger_transfer_post_v1`` run with ``plan_cache_mode =
force_generic_plan``: each connection plans their statements once. A connection that first calls
them while the journal is small (a new deployment, a test or bench database, tables not analyzed
yet) gets sequential scans for the idempotency lookup, the account lock and the balance check, and
keeps them as the tables grow: measured with pgbench calling ``ledger_transfer_post_v1`` on a new
database, 2.4 ms of server CPU per transfer instead of 1.0 ms. Every statement of these functions
looks rows up by key (ids, idempotency keys, entry ids), so ``enable_seqscan = off`` for their
duration (their triggers included) only ever picks the index PostgreSQL would pick on a large table.

``entry_reference`` (reference type and id) is used by no query and was written on every entry.
"""

from django.db import migrations

FUNCTIONS = (
    "ledger_post_entries_v1(text[], text[], text[], text[], text[], text[], bigint[], timestamptz, int[], bigint[],"
    " numeric[], int)",
    "ledger_transfer_post_v1(text, text, bigint, bigint, numeric, numeric, int, text[], text, text, text, text,"
    " bigint, timestamptz, boolean)",
)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0006_ledger_transfer_post_v1"),
    ]

    operations = [
        *(
            migrations.RunSQL(
                sql=f"ALTER FUNCTION {function} SET enable_seqscan = off",
                reverse_sql=f"ALTER FUNCTION {function} RESET enable_seqscan",
            )
            for function in FUNCTIONS
        ),
        migrations.RemoveIndex(model_name="journalentry", name="entry_reference"),
    ]
