"""Back-office screen of the proof of liabilities: each snapshot's totals against custody (solvency).

Read-only: snapshots are taken by ``manage.py liabilities_snapshot`` or the daily beat task.
"""

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from apps.ledger.admin import ReadOnlyAdmin
from apps.ledger.amounts import format_amount

from .models import LiabilitySnapshot
from .selectors import snapshot_solvency


@admin.register(LiabilitySnapshot)
class LiabilitySnapshotAdmin(ReadOnlyAdmin):
    """The history of snapshots; each one's customer liabilities per asset against custody's holdings."""

    list_display = ("id", "taken_at", "block", "leaf_count", "short_assets")
    fields = (
        "solvency",
        "taken_at",
        "block",
        "block_hash",
        "leaf_count",
        "root_hash",
        "snapshot_hash",
        "signature",
        "key",
        "custody_error",
    )

    @admin.display(description="liabilities exceed custody")
    def short_assets(self, snapshot):
        short = [row.asset for row in snapshot_solvency(snapshot) if row.short]
        if snapshot.custody_holdings is None:
            return "custody did not report"
        return format_html('<strong style="color:#b00">{}</strong>', ", ".join(short)) if short else "none"

    @admin.display(description="solvency (per asset)")
    def solvency(self, snapshot):
        rows = format_html_join(
            "",
            "<tr style='{}'><td>{}</td><td class='num'>{}</td><td class='num'>{}</td><td class='num'>{}</td><td>{}</td></tr>",
            (
                (
                    "background:#fdd" if row.short else "",
                    row.asset,
                    format_amount(row.liabilities, row.decimals),
                    "not reported" if row.custody is None else format_amount(row.custody, row.decimals),
                    "-" if row.ratio is None else f"{row.ratio:.4f}",
                    "LIABILITIES EXCEED CUSTODY" if row.short else "ok",
                )
                for row in snapshot_solvency(snapshot)
            ),
        )
        return format_html(
            "<table><thead><tr><th>asset</th><th>customer liabilities (root sums)</th>"
            "<th>custody reported and in flight</th><th>custody / liabilities</th><th></th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )
