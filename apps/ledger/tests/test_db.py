import pytest
from django.db import DataError, OperationalError, transaction

from apps.ledger.db import PreparedCursor
from apps.ledger.transactions import is_retryable


def test_database_errors_of_the_prepared_cursor_are_djangos_and_a_deadlock_is_retryable(db):
    with PreparedCursor() as cursor:
        with pytest.raises(DataError), transaction.atomic():
            cursor.execute("SELECT 1 / %s", [0])
        with pytest.raises(OperationalError) as raised, transaction.atomic():
            cursor.execute("DO $$ BEGIN RAISE EXCEPTION 'simulated' USING ERRCODE = '40P01'; END $$", [])
    assert is_retryable(raised.value)


@pytest.mark.parametrize("prepare", [True, False])
def test_statements_run_the_same_prepared_or_not(db, settings, prepare):
    settings.DATABASE_PREPARED_STATEMENTS = prepare
    with PreparedCursor() as cursor:
        for n in range(3):
            cursor.execute("SELECT %s::int + 1", [n])
            assert cursor.fetchone() == (n + 1,)
