"""Serializer fields: for input, amounts passed on to the services unparsed and plain text; for output,
amounts at their asset's precision, times in the API's format, blank text as null."""

from collections.abc import Callable, Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import get_attribute

from apps.ledger.amounts import format_amount

from .base import api_time
from .exceptions import UnknownField

PLAIN_DECIMAL_PATTERN = r"^[0-9]+(\.[0-9]+)?$"


class InputSerializer(serializers.Serializer):
    """The base of every request body's serializer (the ``*In`` classes): a key the serializer does not
    declare is refused with :class:`UnknownField` (400 ``unknown_field`` naming each), never ignored.

    Checked before any field is validated, so the caller learns of a misspelt or foreign name
    (``timeInForce`` for ``time_in_force``) even when other fields are wrong too.
    """

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            unknown = [name for name in data if name not in self.fields]
            if unknown:
                raise UnknownField(unknown)
        return super().to_internal_value(data)


class JsonBoolean(serializers.BooleanField):
    """A JSON ``true`` or ``false``, nothing else: DRF's ``BooleanField`` also takes ``"yes"``, ``"on"``, ``1`` and
    ``"1"``, where every other field of a JSON body takes its own JSON type only (break-it review). Else 400
    ``invalid_request`` naming the field."""

    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data):
        if data is True or data is False:
            return data
        self.fail("invalid")


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "pattern": PLAIN_DECIMAL_PATTERN, "example": "0.5"},
            {"type": "number", "minimum": 0, "exclusiveMinimum": True},
        ],
        "description": 'A plain decimal string ("0.5") or a JSON number, within the asset\'s precision.',
    }
)
class AmountInput(serializers.Field):
    """An amount or price as given: a string or JSON number (parsed as ``Decimal``, never float).

    It is passed on untouched; the service parses it against the asset's precision and
    names the field when it is malformed (``"NaN"``, ``"1E+2"``, ``-5``, too many decimals ...).
    A string no text column or ``jsonb`` value can hold (a NUL, a lone surrogate) is refused here,
    as :class:`Text` refuses it: 400 ``invalid_request`` naming the field.
    """

    default_error_messages = {
        "null_characters_not_allowed": "Null characters are not allowed.",
        "invalid": "Not a valid string.",
    }

    def to_internal_value(self, data):
        if isinstance(data, str):
            if "\x00" in data:
                self.fail("null_characters_not_allowed")
            try:
                data.encode("utf-8")
            except UnicodeEncodeError:
                self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


class Text(serializers.CharField):
    """A string as stored in PostgreSQL: no NUL (DRF refuses it already) and no lone surrogate.

    Whitespace is kept as given unless ``trim_whitespace`` is asked for. With ``printable``, only characters
    ``str.isprintable`` accepts (no line break, tab or other control, no invisible format character such as
    U+200B or U+202E): an identifier a query parameter can name again (:func:`~apps.api.base.text_param`).
    """

    default_error_messages = {"unprintable": "Only printable characters (no controls, tabs or line breaks)."}

    def __init__(self, *, printable: bool = False, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        self.printable = printable
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        value = super().to_internal_value(data)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            self.fail("invalid")
        if self.printable and not value.isprintable():
            self.fail("unprintable")
        return value


# Output fields: the ``*Out`` serializers both describe a response (the OpenAPI schema) and write it
# (``XOut(obj).data``), so the two cannot drift apart.


@extend_schema_field({"type": "string"})
class AmountOut(serializers.Field):
    """An amount written as an exact decimal string at its asset's precision (:func:`format_amount`).

    ``decimals`` is the dotted path, from the object serialized, to the precision (``"asset.decimals"``,
    ``"decimals"``), or a function of the object and the serializer's context that returns it (an order's
    amounts are in its market's base or quote asset, the market passed in the context); ``negate`` writes ``-value`` (a debit-positive posting shown as a change of a
    credit-normal balance). ``None`` is written as ``null``.
    """

    def __init__(
        self, *, decimals: str | Callable[[Any, dict], int] = "asset.decimals", negate: bool = False, **kwargs
    ):
        self.decimals = decimals
        self.negate = negate
        super().__init__(**kwargs)

    def get_attribute(self, instance):
        value = super().get_attribute(instance)
        if value is None:
            return None
        if callable(self.decimals):
            return value, self.decimals(instance, self.context)
        return value, get_attribute(instance, self.decimals.split("."))

    def to_representation(self, value):
        amount, decimals = value
        return format_amount(-amount if self.negate else amount, decimals)


class ApiTime(serializers.DateTimeField):
    """A time written as the API writes every time: ISO 8601 in UTC with a ``Z`` (:func:`api_time`)."""

    def to_representation(self, value):
        return api_time(value)


class BlankAsNullChoice(serializers.ChoiceField):
    """A choice stored as ``""`` when there is none (an order that did not end early) and written as ``null``."""

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_representation(self, value):
        return value or None


class BlankAsNull(serializers.CharField):
    """Text stored as ``""`` when absent (a txid not yet known, no reject reason) and written as ``null``."""

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_representation(self, value):
        return str(value) or None
