"""Admin helpers: the dashboard, the failed-reconciliation banner, links from report rows to the offending objects."""

from decimal import Decimal

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from apps.backoffice.models import ReconciliationRun
from apps.backoffice.selectors import FIGURE_LABELS, custody_difference_history, report_rows
from apps.backoffice.selectors import dashboard as dashboard_figures
from apps.ledger.amounts import format_display
from exchange.health import CHECKS

register = template.Library()

# Report columns that name an object, and the admin page that shows it.
OBJECT_ADMINS = {
    "account": "ledger_account",
    "entry": "ledger_journalentry",
    "order": "orders_order",
    "trade": "orders_trade",
    "deposit": "wallets_deposit",
    "withdrawal": "wallets_withdrawal",
    "owner": "auth_user",
}


@register.inclusion_tag("admin/backoffice/_reconciliation_banner.html")
def reconciliation_banner():
    """A banner on every admin page while the latest reconciliation run failed."""
    latest = ReconciliationRun.objects.only("id", "ok", "started_at").first()
    return {"failed_run": latest if latest is not None and not latest.ok else None}


@register.inclusion_tag("admin/backoffice/_dashboard.html")
def dashboard():
    """The admin index's dashboard: approvals waiting, the last reconciliation, halted markets, sweeps, worker."""
    try:
        worker = CHECKS["worker"]()
    except Exception as exc:  # the broker down is a dashboard result, not a 500
        worker = f"error: {type(exc).__name__}"
    return {"dashboard": dashboard_figures(), "worker": worker}


@register.simple_tag
def report_cell(column: str, value):
    """A report value, linked to its admin page when the column names an object."""
    admin_name = OBJECT_ADMINS.get(column)
    if admin_name and value not in (None, ""):
        try:
            return format_html('<a href="{}">{}</a>', reverse(f"admin:{admin_name}_change", args=[value]), value)
        except NoReverseMatch:
            pass
    return value


@register.filter
def get_item(mapping: dict, key: str):
    return mapping.get(key)


@register.filter
def figure_label(name: str) -> str:
    """A report figure's name in words ("custody_reported" -> "Custody reported")."""
    return FIGURE_LABELS.get(name, name.replace("_", " ").capitalize())


@register.simple_tag
def asset_rows(report: dict):
    """The per-asset rows of a report (:func:`apps.backoffice.selectors.report_rows`)."""
    return report_rows(report)


@register.filter
def figure(value: str | None) -> str:
    """A report figure (an exact decimal string) with thousands separators, trailing zeros dropped, nothing cut."""
    if value is None:
        return "—"
    number = Decimal(value)
    exponent = number.as_tuple().exponent  # an int: report figures are finite
    return format_display(number, max(0, -exponent) if isinstance(exponent, int) else 0)


@register.filter
def nonzero(value: str | None) -> bool:
    """Whether a figure (a decimal string) is present and not zero."""
    return value is not None and Decimal(value) != 0


CHART_WIDTH, CHART_HEIGHT, CHART_PAD = 640, 90, 6


@register.inclusion_tag("admin/backoffice/_difference_chart.html")
def difference_chart(limit: int = 48):
    """Per asset, an SVG line of the custody difference (ledger minus provider) over the last ``limit`` runs, around
    a zero line; points off zero in red."""
    charts = []
    for code, points in custody_difference_history(limit).items():
        scale = max((abs(value) for _, value in points), default=Decimal(0)) or Decimal(1)
        step = (CHART_WIDTH - 2 * CHART_PAD) / max(len(points) - 1, 1)
        middle = CHART_HEIGHT / 2
        half = middle - CHART_PAD
        coordinates = [
            (CHART_PAD + i * step, middle - float(value / scale) * half, started_at, value)
            for i, (started_at, value) in enumerate(points)
        ]
        charts.append(
            {
                "asset": code,
                "points": " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in coordinates),
                "dots": [{"x": x, "y": y, "time": t, "value": v, "off": v != 0} for x, y, t, v in coordinates],
                "largest": scale if any(v for *_, v in coordinates) else Decimal(0),
            }
        )
    return {"charts": charts, "width": CHART_WIDTH, "height": CHART_HEIGHT, "middle": CHART_HEIGHT / 2}
