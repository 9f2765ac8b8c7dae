"""``ledger_transfer_post_v2`` refuses a transfer whose source and destination are one user.

Called with one user on both sides, migration 0008's function locked a single account, wrote both postings
on it (a net zero) and then stored the source's balance after the entry: the stored balance fell by the amount
while the postings did not move it (invariant 2, found by ``bench/ledger.py``'s reconcile). ``transfer_create``
refuses that transfer before calling the database, so only a direct call could reach it; the function now
raises ``check_violation`` first and writes nothing. The body is otherwise migration 0008's, unchanged.
"""

from importlib import import_module

from django.db import migrations

TRANSFER_POST_V2 = import_module("apps.ledger.migrations.0008_ledger_transfer_post_v2").FUNCTION
BODY_START = "\nBEGIN\n"  # the function body's first line
GUARDED_START = """
BEGIN
    IF p_source = p_destination THEN
        RAISE EXCEPTION 'a transfer''s source and destination are one user (%)', p_source
            USING ERRCODE = 'check_violation';
    END IF;
"""
assert TRANSFER_POST_V2.count(BODY_START) == 1


def _replacing(function: str) -> str:
    return function.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0011_ledger_triggers_not_ignorable"),
    ]

    operations = [
        migrations.RunSQL(
            sql=_replacing(TRANSFER_POST_V2.replace(BODY_START, GUARDED_START)),
            reverse_sql=_replacing(TRANSFER_POST_V2),
        )
    ]
