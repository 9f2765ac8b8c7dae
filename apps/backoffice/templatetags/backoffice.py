"""Admin helpers: the dashboard, the failed-reconciliation banner, links from report rows to the offending objects."""

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from apps.backoffice.models import ReconciliationRun
from apps.backoffice.selectors import dashboard as dashboard_figures
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
