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
