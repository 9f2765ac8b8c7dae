"""Reads of the back office: a customer's log-ins and second factor, pending maker-checker requests, the
risk signals of a withdrawal awaiting approval, the dashboard on the admin index, the reconciliation figures."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, F, Max, Min, Q, QuerySet, Sum
from django.utils import timezone
from django_otp import devices_for_user

from apps.audit.models import AuditLogEntry
from apps.ledger.models import Asset
from apps.orders.models import Market, MarketStatus, Trade
from apps.proofs.models import LiabilitySnapshot
from apps.proofs.selectors import Solvency, snapshot_latest, snapshot_solvency
from apps.wallets.models import (
    CustodyEvent,
    Deposit,
    DepositAddress,
    DepositStatus,
    EventState,
    Withdrawal,
    WithdrawalStatus,
)

from .models import ChangeStatus, ReconciliationRun, SecondFactorReset, WithdrawalsUnblock

LOGIN_ACTIONS = ("login", "login_failed", "login_locked")


def logins_for_user(*, user_id: int, limit: int = 20) -> list[AuditLogEntry]:
    """The user's latest log-ins, failed log-ins and account lockouts (audit log rows on ``auth.user``), newest first.

    ``after`` holds ``ip``, ``user_agent`` and, for a failure or a lockout, the ``username`` tried.
    """
    return list(
        AuditLogEntry.objects.filter(
            object_type="auth.user", object_id=str(user_id), action__in=LOGIN_ACTIONS
        ).order_by("-created_at", "-id")[:limit]
    )


def second_factor_devices(*, user) -> list[dict]:
    """The user's one-time password devices: ``[{"name", "type", "confirmed"}]`` (every django-otp device type)."""
    return [
        {"name": device.name, "type": device._meta.verbose_name, "confirmed": device.confirmed}
        for device in devices_for_user(user, confirmed=None)
    ]


def second_factor_resets_for_user(*, user_id: int) -> QuerySet[SecondFactorReset]:
    """Resets of the user's second factor, newest first (at most one awaits a decision)."""
    return SecondFactorReset.objects.filter(user_id=user_id).select_related("created_by", "decided_by")


def pending_second_factor_reset(*, user_id: int) -> SecondFactorReset | None:
    """The reset of the user's second factor that awaits a decision, if any."""
    return second_factor_resets_for_user(user_id=user_id).filter(status=ChangeStatus.DRAFT).first()


def pending_withdrawals_unblock(*, user_id: int) -> WithdrawalsUnblock | None:
    """The request to lift the user's withdrawals block that awaits a decision, if any (at most one)."""
    return (
        WithdrawalsUnblock.objects.filter(user_id=user_id, status=ChangeStatus.DRAFT)
        .select_related("created_by")
        .first()
    )


# What an approver checks beside the destination address --------------------------------------------

NEW_ACCOUNT_AGE = timedelta(days=7)
RECENT_WINDOW = timedelta(hours=24)


@dataclass(frozen=True)
class AssetAmount:
    asset: str
    decimals: int
    amount: Decimal


@dataclass(frozen=True)
class RiskSignals:
    """Risk signals of one withdrawal, for the approval page (each ``*_warning`` says whether to look twice).

    - ``account_age``: time since the user signed up (a warning under :data:`NEW_ACCOUNT_AGE`);
    - ``first_use``: the user never had a withdrawal to this address completed before;
    - ``deposit_address_of``: the username whose deposit address this is, when it is one of our
      customers' (another customer, or the user's own);
    - ``other_customers``: usernames of other customers who withdrew to this address;
    - ``recent_count`` / ``recent_totals``: the user's other withdrawals requested in the last 24
      hours (cancelled and rejected ones excluded), with their totals per asset;
    - ``untraded_deposits``: per asset, what the user deposited (credited) since their last fill
      as maker or taker, every credited deposit when they never traded; ``last_fill_at``.
    """

    account_age: timedelta
    first_use: bool
    deposit_address_of: str | None
    other_customers: list[str]
    recent_count: int
    recent_totals: list[AssetAmount]
    untraded_deposits: list[AssetAmount]
    last_fill_at: datetime | None
    withdrawal_asset: str

    @property
    def new_account_warning(self) -> bool:
        return self.account_age < NEW_ACCOUNT_AGE

    @property
    def address_owner_warning(self) -> bool:
        return self.deposit_address_of is not None or bool(self.other_customers)

    @property
    def untraded_warning(self) -> bool:
        """Coins of the withdrawn asset came in and go out again without a trade in between."""
        return any(row.asset == self.withdrawal_asset and row.amount > 0 for row in self.untraded_deposits)


def _per_asset(rows) -> list[AssetAmount]:
    return [AssetAmount(code, decimals, total) for code, decimals, total in rows]


def withdrawal_risk_signals(withdrawal: Withdrawal) -> RiskSignals:
    """The :class:`RiskSignals` of ``withdrawal`` (its ``user`` and ``asset`` loaded), read now."""
    user_id, address, now = withdrawal.user_id, withdrawal.address, timezone.now()
    others = Withdrawal.objects.filter(user_id=user_id).exclude(id=withdrawal.id)
    first_use = not others.filter(address=address, status=WithdrawalStatus.COMPLETED).exists()
    owner = (
        DepositAddress.objects.filter(network=withdrawal.network, address=address)
        .values_list("user__username", flat=True)
        .first()
    )
    other_customers = sorted(
        set(
            Withdrawal.objects.filter(network=withdrawal.network, address=address)
            .exclude(user_id=user_id)
            .values_list("user__username", flat=True)
        )
    )
    recent = others.filter(created_at__gte=now - RECENT_WINDOW).exclude(
        status__in=(WithdrawalStatus.CANCELLED, WithdrawalStatus.REJECTED)
    )
    recent_totals = (
        recent.values_list("asset__code", "asset__decimals")
        .annotate(requested=Sum(F("amount") + F("fee")))  # not "total": Withdrawal.total is a property
        .order_by("asset__code")
    )
    last_fill_at = Trade.objects.filter(Q(taker_user_id=user_id) | Q(maker_user_id=user_id)).aggregate(
        last=Max("created_at")
    )["last"]
    deposits = Deposit.objects.filter(user_id=user_id, status=DepositStatus.CREDITED)
    if last_fill_at is not None:
        deposits = deposits.filter(credited_at__gt=last_fill_at)
    untraded = (
        deposits.values_list("asset__code", "asset__decimals").annotate(total=Sum("amount")).order_by("asset__code")
    )
    return RiskSignals(
        account_age=now - withdrawal.user.date_joined,
        first_use=first_use,
        deposit_address_of=owner,
        other_customers=other_customers,
        recent_count=recent.count(),
        recent_totals=_per_asset(recent_totals),
        untraded_deposits=_per_asset(untraded),
        last_fill_at=last_fill_at,
        withdrawal_asset=withdrawal.asset.code,
    )


# The dashboard on the admin index ---------------------------------------------------------------


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
    means the worker or beat is not doing its work. ``snapshot``: the latest liabilities snapshot
    (its ``block`` loaded; None before the first) and ``solvency`` its per-asset liabilities against
    the custody holdings reported when it was taken (:func:`apps.proofs.selectors.snapshot_solvency`).
    ``rejected_events``: custody events rejected within ``REJECTED_EVENTS_WINDOW`` (a report contradicting what was
    recorded, a credited deposit reported failed): each needs an operator, and nothing else would say so.
    """

    approvals: list[AssetTotal]
    oldest_approval: datetime | None
    last_run: ReconciliationRun | None
    halted: list[Market]
    overdue_events: int
    overdue_withdrawals: int
    overdue_after: timedelta
    snapshot: LiabilitySnapshot | None = None
    solvency: list["AssetSolvency"] = field(default_factory=list)
    rejected_events: int = 0
    checked_at: datetime = field(default_factory=timezone.now)

    @property
    def approvals_count(self) -> int:
        return sum(total.count for total in self.approvals)

    @property
    def sweeps_healthy(self) -> bool:
        return self.overdue_events == 0 and self.overdue_withdrawals == 0

    @property
    def solvent(self) -> bool | None:
        """Custody covers the liabilities of every asset of the latest snapshot; None without a snapshot or a
        custody report."""
        if self.snapshot is None or self.snapshot.custody_holdings is None:
            return None
        return not any(row.figures.short for row in self.solvency)


@dataclass(frozen=True)
class AssetSolvency:
    """One asset's line of a snapshot's solvency: the asset (for its display places; None once it is gone from the
    assets table) and the figures (:class:`apps.proofs.selectors.Solvency`)."""

    asset: Asset | None
    figures: Solvency

    @property
    def places(self) -> int:
        """Decimals to show: the asset's display places, else the snapshot's precision of it."""
        return self.figures.decimals if self.asset is None else self.asset.display_places


def overdue_after() -> timedelta:
    """How long work may wait before the dashboard calls it overdue: twice the sweeps' delay plus one interval."""
    return timedelta(seconds=2 * settings.WALLETS_SWEEP_AFTER + settings.WALLETS_SWEEP_INTERVAL)


def _solvency(snapshot: LiabilitySnapshot | None) -> list[AssetSolvency]:
    if snapshot is None:
        return []
    figures = snapshot_solvency(snapshot)
    assets = {asset.code: asset for asset in Asset.objects.filter(code__in=[row.asset for row in figures])}
    return [AssetSolvency(assets.get(row.asset), row) for row in figures]


REJECTED_EVENTS_WINDOW = timedelta(days=1)
"""How far back the dashboard counts rejected custody events (the list in the admin keeps them all)."""


def dashboard() -> Dashboard:
    """The admin index's figures (see :class:`Dashboard`)."""
    waiting = Withdrawal.objects.filter(status=WithdrawalStatus.AWAITING_APPROVAL)
    per_asset = waiting.values("asset_id").annotate(amount=Sum("amount"), count=Count("id")).order_by("asset_id")
    assets = Asset.objects.in_bulk([row["asset_id"] for row in per_asset])
    cutoff = timezone.now() - overdue_after()
    snapshot = snapshot_latest()
    return Dashboard(
        approvals=[AssetTotal(assets[row["asset_id"]], row["amount"], row["count"]) for row in per_asset],
        oldest_approval=waiting.aggregate(oldest=Min("created_at"))["oldest"],
        last_run=ReconciliationRun.objects.first(),
        halted=list(Market.objects.filter(status=MarketStatus.HALTED).order_by("symbol")),
        overdue_events=CustodyEvent.objects.filter(state=EventState.RECEIVED, received_at__lte=cutoff).count(),
        overdue_withdrawals=Withdrawal.objects.filter(status=WithdrawalStatus.APPROVED, decided_at__lte=cutoff).count(),
        overdue_after=overdue_after(),
        snapshot=snapshot,
        solvency=_solvency(snapshot),
        rejected_events=CustodyEvent.objects.filter(
            state=EventState.REJECTED, received_at__gte=timezone.now() - REJECTED_EVENTS_WINDOW
        ).count(),
    )


# The per-asset figures of a reconciliation report (apps.ledger.checks, apps.wallets.checks), in words, in the
# order the reconciliation screen shows them; "custody_difference" is computed (ledger, less what is in flight,
# minus provider: invariant 5).
FIGURE_LABELS = {
    "custody": "Custody in ledger",
    "custody_in_flight": "Custody in flight",
    "custody_reported": "Custody reported",
    "custody_difference": "Difference",
    "user_available": "Users' available",
    "user_held": "Users' on hold",
    "fee_revenue": "Fee revenue",
    "network_fee_expense": "Network fees paid",
    "equity": "Equity",
}


def custody_difference(figures: dict) -> Decimal | None:
    """Custody in the ledger, less what is in flight (reports before it was recorded: none), minus what the provider
    reported (``None`` when the provider did not answer): invariant 5's difference."""
    if "custody" not in figures or "custody_reported" not in figures:
        return None
    in_flight = Decimal(figures.get("custody_in_flight", 0))
    return Decimal(figures["custody"]) - in_flight - Decimal(figures["custody_reported"])


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
