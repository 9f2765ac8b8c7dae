"""Reads of the back office: the dashboard on the admin index."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Min, Sum
from django.utils import timezone

from apps.ledger.models import Asset
from apps.orders.models import Market, MarketStatus
from apps.wallets.models import CustodyEvent, EventState, Withdrawal, WithdrawalStatus

from .models import ReconciliationRun


@dataclass(frozen=True)
class AssetTotal:
    """A sum of amounts of one asset (``amount`` exact, in units of ``asset``)."""

    asset: Asset
    amount: Decimal
    count: int


@dataclass(frozen=True)
class Dashboard:
    """What an operator checks first (all read on one request; none of it is cached).

    ``approvals``: withdrawals awaiting approval, per asset; ``oldest_approval`` the time the
    oldest was requested. ``last_run``: the latest reconciliation run. ``halted``: halted markets.
    ``overdue_events`` / ``overdue_withdrawals``: custody events still unprocessed and approved
    withdrawals still unsubmitted well past the sweeps' delay (``overdue_after``): more than zero
    means the worker or beat is not doing its work.
    """

    approvals: list[AssetTotal]
    oldest_approval: datetime | None
    last_run: ReconciliationRun | None
    halted: list[Market]
    overdue_events: int
    overdue_withdrawals: int
    overdue_after: timedelta
    checked_at: datetime = field(default_factory=timezone.now)

    @property
    def approvals_count(self) -> int:
        return sum(total.count for total in self.approvals)

    @property
    def sweeps_healthy(self) -> bool:
        return self.overdue_events == 0 and self.overdue_withdrawals == 0


def overdue_after() -> timedelta:
    """How long work may wait before the dashboard calls it overdue: twice the sweeps' delay plus one interval."""
    return timedelta(seconds=2 * settings.WALLETS_SWEEP_AFTER + settings.WALLETS_SWEEP_INTERVAL)


def dashboard() -> Dashboard:
    """The admin index's figures (see :class:`Dashboard`)."""
    waiting = Withdrawal.objects.filter(status=WithdrawalStatus.AWAITING_APPROVAL)
    per_asset = waiting.values("asset_id").annotate(amount=Sum("amount"), count=Count("id")).order_by("asset_id")
    assets = Asset.objects.in_bulk([row["asset_id"] for row in per_asset])
    cutoff = timezone.now() - overdue_after()
    return Dashboard(
        approvals=[AssetTotal(assets[row["asset_id"]], row["amount"], row["count"]) for row in per_asset],
        oldest_approval=waiting.aggregate(oldest=Min("created_at"))["oldest"],
        last_run=ReconciliationRun.objects.first(),
        halted=list(Market.objects.filter(status=MarketStatus.HALTED).order_by("symbol")),
        overdue_events=CustodyEvent.objects.filter(state=EventState.RECEIVED, received_at__lte=cutoff).count(),
        overdue_withdrawals=Withdrawal.objects.filter(status=WithdrawalStatus.APPROVED, decided_at__lte=cutoff).count(),
        overdue_after=overdue_after(),
    )


# The per-asset figures of a reconciliation report (apps.ledger.checks, apps.wallets.checks), in words, in the
# order the reconciliation screen shows them; "custody_difference" is computed (ledger minus provider).
FIGURE_LABELS = {
    "custody": "Custody in ledger",
    "custody_reported": "Custody reported",
    "custody_difference": "Difference",
    "user_available": "Users' available",
    "user_held": "Users' on hold",
    "fee_revenue": "Fee revenue",
    "network_fee_expense": "Network fees paid",
    "equity": "Equity",
}


def custody_difference(figures: dict) -> Decimal | None:
    """Custody in the ledger minus what the provider reported (``None`` when the provider did not answer)."""
    if "custody" not in figures or "custody_reported" not in figures:
        return None
    return Decimal(figures["custody"]) - Decimal(figures["custody_reported"])


def report_rows(report: dict) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """The per-asset table of a report: ``[(asset code, [(figure name, value or None), ...])]`` in
    :data:`FIGURE_LABELS` order, then any other figure; the difference is a plain decimal string."""
    assets = report.get("assets", {})
    extra = [name for figures in assets.values() for name in figures if name not in FIGURE_LABELS]
    names = [*FIGURE_LABELS, *dict.fromkeys(extra)]
    rows = []
    for code, figures in assets.items():
        difference = custody_difference(figures)
        values = {**figures, "custody_difference": None if difference is None else f"{difference:f}"}
        rows.append((code, [(name, values.get(name)) for name in names]))
    return rows


def custody_difference_history(limit: int = 48) -> dict[str, list[tuple[datetime, Decimal]]]:
    """Per asset, the custody difference of the last ``limit`` runs, oldest first (runs without figures skipped)."""
    history: dict[str, list[tuple[datetime, Decimal]]] = {}
    for run in reversed(ReconciliationRun.objects.only("started_at", "report")[:limit]):
        for code, figures in run.report.get("assets", {}).items():
            difference = custody_difference(figures)
            if difference is not None:
                history.setdefault(code, []).append((run.started_at, difference))
    return history
