"""Template filters for amounts: always exact Decimals, never float.

``amount`` writes an amount at its full ledger precision (forms, API-like text). ``shown`` writes
it as pages show it (the asset's display precision, thousands separators, trailing zeros
trimmed) inside a ``<span>`` whose ``title`` holds the exact amount; ``price`` writes a price at
its market's tick; ``rule`` a market's step or minimum in full, whatever the display precision.
"""

from decimal import Decimal

from django import template
from django.utils.html import format_html

from apps.ledger.amounts import format_amount, format_display, format_exact
from apps.orders.models import Market, decimals_of

register = template.Library()


@register.filter
def amount(value: Decimal | None, decimals: int) -> str:
    """``{{ balance|amount:8 }}`` -> ``"0.50000000"``; empty for None."""
    return "" if value is None else format_amount(Decimal(value), int(decimals))


def _places(precision) -> int:
    """Decimals to show: an int, or an asset (``display_places``)."""
    return int(getattr(precision, "display_places", precision))


@register.filter
def shown(value: Decimal | None, precision) -> str:
    """``{{ balance|shown:asset }}`` (or ``|shown:4``) -> ``<span class="amount" title="1234.56789">1,234.5678</span>``.

    Cut to the display precision (never rounded up), trailing zeros trimmed; empty for None.
    """
    if value is None:
        return ""
    value = Decimal(value)
    return format_html(
        '<span class="amount" title="{}">{}</span>', format_exact(value), format_display(value, _places(precision))
    )


@register.filter
def price(value: Decimal | None, market: Market) -> str:
    """``{{ order.price|price:market }}`` -> ``"59,550.00"``: the price with its market's tick places; empty for None."""
    if value is None:
        return ""
    return format_display(Decimal(value), decimals_of(market.tick_size), trim=False)


@register.filter
def rule(value: Decimal | None) -> str:
    """``{{ market.step_size|rule }}`` -> ``"0.0001"``: a market rule (step, minimum) in full, trailing zeros trimmed,
    with thousands separators; never cut to the asset's display places, which may be coarser. Empty for None."""
    if value is None:
        return ""
    value = Decimal(value)
    return format_display(value, decimals_of(value))


@register.filter
def negate(value: Decimal) -> Decimal:
    """Postings are debit-positive; a user's balance moves by ``-amount``."""
    return -value
