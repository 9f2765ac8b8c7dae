"""Serializer fields for API input: amounts passed on to the services unparsed, and plain text."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

PLAIN_DECIMAL_PATTERN = r"^[0-9]+(\.[0-9]+)?$"


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
    """

    def to_internal_value(self, data):
        return data

    def to_representation(self, value):
        return value


class Text(serializers.CharField):
    """A string as stored in PostgreSQL: no NUL (DRF refuses it already) and no lone surrogate.

    Whitespace is kept as given unless ``trim_whitespace`` is asked for.
    """

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        value = super().to_internal_value(data)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            self.fail("invalid")
        return value
