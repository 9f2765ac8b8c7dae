"""Every trigger the project installs is one that ``SET pgtrigger.ignore`` cannot switch off (apps/core/triggers.py)."""

import pytest
from django.db import connection


@pytest.mark.django_db
def test_no_trigger_of_the_project_asks_pgtriggers_ignore_setting():
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname, t.tgname, p.prosrc LIKE '%%_pgtrigger_should_ignore%%'
            FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid
            WHERE NOT t.tgisinternal AND t.tgname LIKE 'pgtrigger_%%'
            """
        )
        triggers = cursor.fetchall()

    assert len(triggers) >= 15  # the ledger's, the audit logs', the orders', the proofs'
    assert [(table, name) for table, name, ignorable in triggers if ignorable] == []
