"""Request parameters as Binance reads them: the query string and the form body, each name once.

Binance's rules (spot API documentation, "General API information"): parameters may be sent
in the query string or in an ``application/x-www-form-urlencoded`` body, in any order; a
name sent twice is -1101; a name the endpoint does not take is -1104 ("Not all sent
parameters were read"); a missing mandatory one is -1102; a value of the wrong form is
-1100 naming the legal range; a decimal finer than the asset's precision is -1111 (never
rounded). Decimals are plain strings (``"0.001"``): no exponent, sign, NaN or Infinity.
"""

import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Literal, overload
from urllib.parse import parse_qsl

from apps.ledger.amounts import check_amount
from apps.ledger.errors import InvalidAmount

from .errors import (
    BAD_PRECISION,
    TOO_MANY_PARAMETERS,
    UNREAD_PARAMETERS,
    BinanceError,
    illegal,
    invalid_value,
    mandatory,
)

_INTEGER = re.compile(r"[0-9]{1,19}")
_DECIMAL = re.compile(r"[0-9]{1,20}(\.[0-9]{1,30})?")
_TEXT = re.compile(r"[A-Za-z0-9.:/_@-]{1,64}")
MAX_INT64 = 2**63 - 1


def pairs_of(raw: str) -> list[tuple[str, str]]:
    """``name=value`` pairs of a query string or form body, in order (percent-decoded, blanks kept)."""
    return parse_qsl(raw, keep_blank_values=True, errors="replace")


class Params:
    """The request's parameters by name (query string and body together).

    Raises :class:`BinanceError`: -1101 when a name comes twice (across query and body too).
    """

    def __init__(self, pairs: Iterable[tuple[str, str]]):
        self._values: dict[str, str] = {}
        for name, value in pairs:
            if name in self._values:
                raise BinanceError(TOO_MANY_PARAMETERS, "Duplicate values for a parameter detected.")
            self._values[name] = value

    def names(self) -> set[str]:
        return set(self._values)

    def check_all_read(self, allowed: Iterable[str]) -> None:
        """-1104 when a parameter outside ``allowed`` was sent (Binance refuses what it would not read)."""
        unread = self.names() - set(allowed)
        if unread:
            raise BinanceError(
                UNREAD_PARAMETERS,
                f"Not all sent parameters were read; read {len(self._values) - len(unread)} parameter(s) "
                f"but was sent {len(self._values)}. Unknown: {', '.join(sorted(unread))[:200]}.",
            )

    def raw(self, name: str) -> str | None:
        """The value as sent, ``None`` when absent or empty."""
        value = self._values.get(name)
        return value if value else None

    @overload
    def text(self, name: str, *, required: Literal[True], pattern: re.Pattern = _TEXT) -> str: ...
    @overload
    def text(self, name: str, *, required: bool = False, pattern: re.Pattern = _TEXT) -> str | None: ...
    def text(self, name: str, *, required: bool = False, pattern: re.Pattern = _TEXT) -> str | None:
        """A short name or id (letters, digits and ``.:/_@-``); -1102 when required and absent, -1100 when malformed."""
        value = self.raw(name)
        if value is None:
            if required:
                raise mandatory(name)
            return None
        if not pattern.fullmatch(value):
            raise illegal(name, pattern.pattern)
        return value

    @overload
    def integer(
        self, name: str, *, required: Literal[True], default: int | None = None, minimum: int = 0, maximum: int = ...
    ) -> int: ...
    @overload
    def integer(
        self, name: str, *, required: bool = False, default: int, minimum: int = 0, maximum: int = ...
    ) -> int: ...
    @overload
    def integer(
        self, name: str, *, required: bool = False, default: None = None, minimum: int = 0, maximum: int = ...
    ) -> int | None: ...
    def integer(
        self,
        name: str,
        *,
        required: bool = False,
        default: int | None = None,
        minimum: int = 0,
        maximum: int = MAX_INT64,
    ) -> int | None:
        """A whole number in ``minimum..maximum``; -1102 when required and absent, -1100 when not digits or out of range."""
        value = self.raw(name)
        if value is None:
            if required:
                raise mandatory(name)
            return default
        if not _INTEGER.fullmatch(value) or not minimum <= int(value) <= maximum:
            raise illegal(name, f"{minimum}..{maximum}")
        return int(value)

    @overload
    def decimal(self, name: str, *, decimals: int, required: Literal[True]) -> Decimal: ...
    @overload
    def decimal(self, name: str, *, decimals: int, required: bool = False) -> Decimal | None: ...
    def decimal(self, name: str, *, decimals: int, required: bool = False) -> Decimal | None:
        """A positive amount with at most ``decimals`` places (the asset's precision).

        -1102 when required and absent, -1100 when not a plain decimal, -1111 when finer than
        the precision, -1130 when zero or beyond the ledger's range.
        """
        value = self.raw(name)
        if value is None:
            if required:
                raise mandatory(name)
            return None
        if not _DECIMAL.fullmatch(value):
            raise illegal(name, "a plain decimal such as 0.001")
        amount = Decimal(value)
        exponent = amount.normalize().as_tuple().exponent  # an int: _DECIMAL admits no NaN or Infinity
        if amount != 0 and isinstance(exponent, int) and exponent < -decimals:
            raise BinanceError(BAD_PRECISION, f"Precision is over the maximum defined for this asset ('{name}').")
        try:
            return check_amount(amount, decimals=decimals, field=name)
        except InvalidAmount:
            raise invalid_value(name) from None

    @overload
    def choice(self, name: str, choices: Iterable[str], *, required: Literal[True], error=None) -> str: ...
    @overload
    def choice(self, name: str, choices: Iterable[str], *, required: bool = False, error=None) -> str | None: ...
    def choice(self, name: str, choices: Iterable[str], *, required: bool = False, error=None) -> str | None:
        """One of ``choices`` (exact, upper case as Binance writes them); ``error`` replaces -1130 for others."""
        value = self.raw(name)
        if value is None:
            if required:
                raise mandatory(name)
            return None
        if value not in choices:
            raise error if error is not None else invalid_value(name)
        return value
