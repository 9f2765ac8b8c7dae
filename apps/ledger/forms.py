"""The form field of :class:`~apps.ledger.models.AmountField` (the admin's forms of assets, markets and the rest)."""

from django import forms
from django.core.exceptions import ValidationError

from .amounts import PLAIN_DECIMAL

PLAIN_AMOUNT_MESSAGE = "Enter a plain decimal number in the digits 0-9, such as 0.5."


class PlainAmountFormField(forms.DecimalField):
    """A decimal typed as :func:`~apps.ledger.amounts.parse_amount` takes it: ASCII digits, an optional sign and
    point, no exponent. Django's own also takes other scripts' digits (``١``) and exponents (``1e5``), which the
    traders' forms refuse (break-it review: a market's minimum notional was saved from an Arabic-Indic digit)."""

    def to_python(self, value):
        text = value.strip() if isinstance(value, str) else value
        if isinstance(text, str) and text and not PLAIN_DECIMAL.fullmatch(text):
            raise ValidationError(PLAIN_AMOUNT_MESSAGE, code="invalid")
        return super().to_python(value)
