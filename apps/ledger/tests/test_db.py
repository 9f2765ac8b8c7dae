from datetime import UTC, datetime
from decimal import Decimal
from enum import Enum

import pytest
from django.db import DataError, OperationalError, models, transaction

from apps.ledger.db import PreparedCursor, array_literal
from apps.ledger.transactions import is_retryable


class Side(models.TextChoices):  # a model choice, as the orders app's
    BUY = "buy"
    SELL = "sell"


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


@pytest.mark.parametrize(
    ("sql_type", "values"),
    [
        ("numeric", [Decimal("12345678901234567890.123456789012345678"), Decimal("-0.5"), Decimal("1E-18"), None]),
        ("bigint", [0, -1, 2**62, None]),
        ("boolean", [True, False, None]),
        ("text", ['a "quoted" \\ back,slash', "{braces}", "NULL", "", " spaced ", "ünïcode", None]),
        ("text", [Side.BUY, Side.SELL]),
        ("timestamptz", [datetime(2026, 12, 3, 11, 0, 0, 123456, tzinfo=UTC)]),
    ],
)
def test_an_array_literal_reads_back_as_the_values_it_was_made_of(db, sql_type, values):
    with PreparedCursor() as cursor:
        cursor.execute(f"SELECT %s::{sql_type}[]", [array_literal(values)])
        (read,) = cursor.fetchone()
    assert read == [value.value if isinstance(value, Enum) else value for value in values]


def test_an_array_literal_refuses_a_float():
    with pytest.raises(TypeError, match="float is not an array element"):
        array_literal([Decimal("1"), 0.1])
