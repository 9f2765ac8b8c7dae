from decimal import Decimal

import pytest

from apps.ledger.amounts import check_amount, format_amount, format_as_stored, money, parse_amount
from apps.ledger.errors import InvalidAmount


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0.5", Decimal("0.500000")),
        ("100", Decimal("100")),
        (7, Decimal("7")),
        (Decimal("0.000001"), Decimal("0.000001")),
        ("00012.340", Decimal("12.34")),
        (Decimal("1.500000000"), Decimal("1.5")),
    ],
)
def test_valid_amounts_are_parsed_exactly(raw, expected):
    parsed = parse_amount(raw, decimals=6)
    assert parsed == expected
    assert parsed.as_tuple().exponent == -6


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("NaN", "plain decimal"),
        ("sNaN", "plain decimal"),
        ("Infinity", "plain decimal"),
        ("-Infinity", "plain decimal"),
        ("1E+2", "plain decimal"),
        ("1e-2", "plain decimal"),
        (" 1", "plain decimal"),
        ("", "plain decimal"),
        ("0x10", "plain decimal"),
        ("1,5", "plain decimal"),
        (Decimal("NaN"), "finite"),
        (Decimal("sNaN"), "finite"),
        (Decimal("Infinity"), "finite"),
        (Decimal("1E+400"), "less than"),
        ("123456789012345678901", "less than"),
        ("-5", "positive"),
        (Decimal("-0.1"), "positive"),
        ("0", "greater than zero"),
        ("0.0000000", "greater than zero"),
        ("0.0000001", "At most 6 decimal places"),
        (Decimal("1E-7"), "At most 6 decimal places"),
        (0.5, "string"),
        (1e400, "string"),
        (True, "string"),
        (None, "string"),
        ([], "string"),
    ],
)
def test_invalid_amounts_are_refused_with_the_field_named(raw, message):
    with pytest.raises(InvalidAmount, match=message) as error:
        parse_amount(raw, decimals=6, field="qty")
    assert list(error.value.fields) == ["qty"]


def test_zero_is_allowed_only_when_asked():
    assert parse_amount("0", decimals=2, allow_zero=True) == Decimal("0.00")


def test_check_amount_refuses_non_decimals():
    with pytest.raises(InvalidAmount):
        check_amount(1.5, decimals=8)


def test_format_amount_prints_plain_decimals_at_the_asset_precision():
    assert format_amount(Decimal("0.5"), 8) == "0.50000000"
    assert format_amount(Decimal("1E+2"), 2) == "100.00"
    assert format_amount(Decimal("0E-18"), 6) == "0.000000"


def test_money_registers_crypto_codes():
    value = money(Decimal("0.00000001"), "BTC")
    assert value.currency.code == "BTC"
    assert value.amount == Decimal("0.00000001")


def test_a_registered_crypto_code_is_named_by_its_code_with_the_default_sub_unit():
    """Regression: the code was passed as the sub-unit and an empty list as the name."""
    currency = money(Decimal(1), "ZZT").currency
    assert (currency.name, currency.sub_unit, currency.numeric) == ("ZZT", 1, "000")


def test_every_thread_computes_amounts_with_80_digits():
    """NUMERIC(38, 18) amounts add and quantize exactly, in any thread (Python's default is 28 digits)."""
    import threading

    huge = Decimal("12345678901234567890.123456789012345678")  # 38 significant digits
    results = []

    def compute():
        results.append((huge + Decimal("0.000000000000000001"), check_amount(huge, decimals=18)))

    thread = threading.Thread(target=compute)
    thread.start()
    thread.join()
    compute()
    for total, checked in results:
        assert total == Decimal("12345678901234567890.123456789012345679")
        assert checked == huge


def test_format_as_stored_rounds_nothing_away():
    assert format_as_stored(Decimal("0.5"), 8) == "0.50000000"
    assert format_as_stored(Decimal("-2"), 6) == "-2.000000"
    assert format_as_stored(Decimal("0.000000004"), 8) == "0.000000004"
    assert format_as_stored(Decimal("1.000000400000000000"), 6) == "1.0000004"
