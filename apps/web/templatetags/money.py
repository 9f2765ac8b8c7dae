"""Template filters for amounts: always the asset's precision, never float."""

from decimal import Decimal

from django import template

from apps.ledger.amounts import format_amount

register = template.Library()


@register.filter
def amount(value: Decimal | None, decimals: int) -> str:
    """``{{ balance|amount:8 }}`` -> ``"0.50000000"``; empty for None."""
    return "" if value is None else format_amount(Decimal(value), int(decimals))


@register.filter
def negate(value: Decimal) -> Decimal:
    """Postings are debit-positive; a user's balance moves by ``-amount``."""
    return -value
