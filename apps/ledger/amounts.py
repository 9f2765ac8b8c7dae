"""Exact amounts: parsing, validation and formatting.

Every amount is a ``Decimal`` that is an exact multiple of its asset's precision
(``10 ** -decimals``) and fits ``NUMERIC(38, 18)``. Input with more decimals than the
asset allows is rejected, never rounded (DESIGN.md section 2).
"""

import decimal
import re
from decimal import Decimal, InvalidOperation

import moneyed
from moneyed import Money

from .errors import InvalidAmount

# NUMERIC(38, 18) leaves 20 digits before the decimal point: every amount and balance stays below this.
MAX_INTEGER_DIGITS = 20
AMOUNT_LIMIT = Decimal(10) ** MAX_INTEGER_DIGITS
# Significant digits of Decimal arithmetic: two NUMERIC(38, 18) amounts multiply exactly.
DECIMAL_PRECISION = 80


def configure_decimal_context() -> None:
    """Give every thread's Decimal arithmetic 80 significant digits instead of Python's default 28.

    With 28 digits, adding or quantizing amounts of an 18-decimal asset above 10^10 silently
    rounds or raises ``InvalidOperation``. Called once from ``LedgerConfig.ready``: it sets the
    context of the current thread and ``decimal.DefaultContext``, from which every thread that
    starts using Decimal later (request threads, Celery workers) copies its own.
    """
    decimal.DefaultContext.prec = DECIMAL_PRECISION
    decimal.DefaultContext.traps[decimal.InvalidOperation] = True
    decimal.setcontext(decimal.Context(prec=DECIMAL_PRECISION, traps=decimal.DefaultContext.traps.copy()))


PLAIN_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def parse_amount(raw: object, *, decimals: int, field: str = "amount", allow_zero: bool = False) -> Decimal:
    """Parse user input into an exact positive amount with at most ``decimals`` decimals.

    ``raw`` may be a plain decimal string (``"0.5"``; no exponent, sign or blanks),
    an ``int`` or a ``Decimal``. Returns the amount quantized to ``decimals`` places.

    Raises :class:`InvalidAmount` naming ``field`` for anything else: floats, ``NaN``,
    ``Infinity``, exponent notation in strings, negatives, zero (unless
    ``allow_zero``), more decimals than allowed, or more than 20 integer digits.
    """
    if isinstance(raw, bool) or not isinstance(raw, (str, int, Decimal)):
        raise InvalidAmount('Must be a decimal number written as a string, such as "0.5".', field=field)
    if isinstance(raw, str):
        if not PLAIN_DECIMAL.fullmatch(raw):
            raise InvalidAmount('Must be a plain decimal number, such as "0.5".', field=field)
        raw = Decimal(raw)
    return check_amount(Decimal(raw), decimals=decimals, field=field, allow_zero=allow_zero)


def check_amount(value: Decimal, *, decimals: int, field: str = "amount", allow_zero: bool = False) -> Decimal:
    """Check that ``value`` is a finite positive multiple of ``10 ** -decimals``; return it quantized.

    Raises :class:`InvalidAmount` (see :func:`parse_amount`).
    """
    if not isinstance(value, Decimal) or not value.is_finite():
        raise InvalidAmount("Must be a finite decimal number.", field=field)
    if value < 0:
        raise InvalidAmount("Must be positive.", field=field)
    if value == 0:
        if allow_zero:
            return Decimal(0).quantize(quantum(decimals))
        raise InvalidAmount("Must be greater than zero.", field=field)
    if value.adjusted() >= MAX_INTEGER_DIGITS:
        raise InvalidAmount(f"Must be less than 10^{MAX_INTEGER_DIGITS}.", field=field)
    exponent = value.normalize().as_tuple().exponent
    if not isinstance(exponent, int) or exponent < -decimals:  # a str exponent is NaN or Infinity
        raise InvalidAmount(f"At most {decimals} decimal places are allowed.", field=field)
    return value.quantize(quantum(decimals))


def fits(value: Decimal) -> bool:
    """Whether ``value`` (any sign) can be stored as an amount or balance: ``|value| < 10^20``."""
    return abs(value) < AMOUNT_LIMIT


def is_exact(value: Decimal, decimals: int) -> bool:
    """Whether ``value`` (any sign) is an exact multiple of ``10 ** -decimals``."""
    try:
        return value == value.quantize(quantum(decimals))
    except InvalidOperation:
        return False


def quantum(decimals: int) -> Decimal:
    """``10 ** -decimals`` as a Decimal (``quantum(6) == Decimal("0.000001")``)."""
    return Decimal(1).scaleb(-decimals)


def format_amount(value: Decimal, decimals: int) -> str:
    """Plain decimal string with exactly ``decimals`` places (``format_amount(Decimal("0.5"), 8) == "0.50000000"``)."""
    return f"{value.quantize(quantum(decimals)):f}"


def format_as_stored(value: Decimal, decimals: int) -> str:
    """:func:`format_amount` of an amount exact at ``decimals`` places; any other (finer than the asset's precision:
    only a row written past the database's checks) with every significant digit (:func:`format_exact`), never
    rounded, so that a change below the asset's smallest unit still shows
    (``format_as_stored(Decimal("0.000000004000"), 8) == "0.000000004"``)."""
    return format_amount(value, decimals) if is_exact(value, decimals) else format_exact(value)


def format_display(value: Decimal, decimals: int, *, trim: bool = True) -> str:
    """An amount as pages show it: cut (never rounded up) to ``decimals`` places, with thousands separators.

    ``trim`` drops trailing zeros of the fraction, the custom for quantities and balances
    (``format_display(Decimal("1234.50000000"), 8) == "1,234.5"``); prices keep their tick's
    places (``trim=False``: ``"59,550.00"``). Cutting towards zero means a balance is never
    shown as more than it is; the exact value goes in a tooltip (:func:`format_exact`).
    """
    shown = value.quantize(quantum(decimals), rounding=decimal.ROUND_DOWN)
    if trim:
        shown = shown.normalize() if shown else Decimal(0)
        if shown == shown.to_integral_value():
            shown = shown.quantize(Decimal(1))
    if shown == 0:
        shown = abs(shown)  # never "-0"
    return f"{shown:,f}"


def format_exact(value: Decimal) -> str:
    """The full amount as a plain decimal, without trailing zeros (``Decimal("0E-18")`` -> ``"0"``)."""
    if value == 0:
        return "0"
    normalized = value.normalize()
    if normalized == normalized.to_integral_value():
        normalized = normalized.quantize(Decimal(1))
    return f"{normalized:f}"


def money(amount: Decimal, code: str) -> Money:
    """A ``Money`` value in asset ``code``; crypto codes are registered as currencies on first use."""
    try:
        moneyed.get_currency(code)
    except moneyed.CurrencyDoesNotExist:
        moneyed.add_currency(code, numeric="000", name=code)
    return Money(amount, code)
