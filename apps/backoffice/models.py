"""The operators' records: reconciliation runs, maker-checker requests (adjustments, fee changes,
market filter changes, second-factor resets, lifting a withdrawals block), the audit log."""

from django.conf import settings
from django.contrib.auth.models import User
from django.db import models
from django.db.models import F, Q

from apps.core import triggers as enforced
from apps.ledger.models import AmountField, JournalEntry
from apps.orders.models import RATE_DECIMAL_PLACES, RATE_MAX_DIGITS, FeeSchedule, Market
from apps.wallets.models import Withdrawal


class ReconciliationRun(models.Model):
    """One run of every invariant check: ``ok`` and the full report (``Report.as_dict()``).

    ``triggered_by`` is the operator who pressed "run now"; empty for the hourly schedule.
    """

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    ok = models.BooleanField()
    report = models.JSONField()
    triggered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["-started_at"]
        get_latest_by = "started_at"
        permissions = [("run_reconciliation", "Can run the reconciliation now")]
        triggers = [enforced.append_only("append_only")]

    def __str__(self) -> str:
        return f"Reconciliation {self.started_at:%Y-%m-%d %H:%M:%S} {'passed' if self.ok else 'FAILED'}"

    @property
    def failed_checks(self) -> list[dict]:
        return [check for check in self.report.get("checks", []) if not check["ok"]]


class ChangeStatus(models.TextChoices):
    DRAFT = "draft", "Awaiting approval"
    APPROVED = "approved", "Approved and applied"
    REJECTED = "rejected", "Rejected"


class MakerCheckerDraft(models.Model):
    """A request drafted by one operator (``created_by``) and decided by another (``decided_by``): maker-checker.

    ``status`` starts as ``draft``; the decision sets ``decided_by``, ``decided_at`` and, for a
    rejection, ``decision_note`` (why), in the transaction that applies it
    (:func:`apps.backoffice.services._draft_decide`). Subclasses add what is requested, its
    permission and the constraints that keep the decision consistent with the status
    (:func:`_maker_checker_constraints`); a subclass may widen ``status``'s choices.
    """

    status = models.CharField(max_length=16, choices=ChangeStatus.choices, default=ChangeStatus.DRAFT)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)

    class Meta:
        abstract = True
        ordering = ["-created_at"]


def _checker_is_not_maker(prefix: str) -> models.CheckConstraint:
    """A request is never decided by its author."""
    return models.CheckConstraint(condition=~Q(decided_by=F("created_by")), name=f"{prefix}_checker_is_not_maker")


def _maker_checker_constraints(prefix: str) -> list[models.CheckConstraint]:
    """A request decided by someone other than its author, and decided exactly when it left the draft state."""
    return [
        _checker_is_not_maker(prefix),
        models.CheckConstraint(
            condition=Q(status=ChangeStatus.DRAFT, decided_by__isnull=True, decided_at__isnull=True)
            | Q(status__in=[ChangeStatus.APPROVED, ChangeStatus.REJECTED], decided_by__isnull=False)
            & Q(decided_at__isnull=False),
            name=f"{prefix}_status_consistent",
        ),
    ]


class AdjustmentStatus(models.TextChoices):
    DRAFT = "draft", "Awaiting approval"
    APPROVED = "approved", "Approved and posted"
    REJECTED = "rejected", "Rejected"
    WITHDRAWN = "withdrawn", "Withdrawn by its author"


class Adjustment(MakerCheckerDraft):
    """A manual adjustment drafted by one operator and approved by another (maker-checker).

    ``legs`` is ``[{"account": id, "amount": "signed decimal"}]`` (debit positive), balanced
    per asset with an ``equity`` leg; it is posted through the ledger only when approved
    (``entry`` then references the journal entry). Its author may withdraw it while it is a draft
    (``decided_at`` is then when; nothing is posted).
    """

    memo = models.TextField()
    legs = models.JSONField()
    status = models.CharField(max_length=16, choices=AdjustmentStatus.choices, default=AdjustmentStatus.DRAFT)
    entry = models.OneToOneField(JournalEntry, null=True, blank=True, on_delete=models.PROTECT, related_name="+")

    class Meta(MakerCheckerDraft.Meta):
        permissions = [("approve_adjustment", "Can approve or reject manual adjustments")]
        constraints = [
            _checker_is_not_maker("adjustment"),
            models.CheckConstraint(
                condition=Q(status=AdjustmentStatus.DRAFT, decided_by__isnull=True, entry__isnull=True)
                | Q(status=AdjustmentStatus.APPROVED, decided_by__isnull=False, entry__isnull=False)
                | Q(status=AdjustmentStatus.REJECTED, decided_by__isnull=False, entry__isnull=True)
                | Q(status=AdjustmentStatus.WITHDRAWN, decided_by__isnull=True, entry__isnull=True),
                name="adjustment_status_consistent",
            ),
        ]

    def __str__(self) -> str:
        return f"Adjustment #{self.id} ({self.get_status_display()})"


class FeeChangeKind(models.TextChoices):
    CREATE = "create", "Create a fee schedule"
    RATES = "rates", "Change a schedule's rates"
    MAKE_DEFAULT = "make_default", "Make a schedule the default"
    ASSIGN_TIER = "assign_tier", "Assign a user to a schedule"


class FeeChange(MakerCheckerDraft):
    """A change of the fee schedules drafted by one operator and applied when another approves (maker-checker).

    By ``kind``: ``create`` a schedule ``name`` with ``maker_rate``/``taker_rate``; ``rates``
    sets them on ``schedule``; ``make_default`` moves the default to ``schedule``;
    ``assign_tier`` makes ``user`` pay ``schedule`` (empty: the default again). Rates are
    fractions (0.001 is 0.1 %), capped by ``settings.FEE_RATE_MAX`` when drafted and again
    when applied. For ``create``, ``schedule`` is the schedule created on approval.
    """

    kind = models.CharField(max_length=16, choices=FeeChangeKind.choices)
    schedule = models.ForeignKey(FeeSchedule, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=64, blank=True)
    maker_rate = models.DecimalField(
        max_digits=RATE_MAX_DIGITS, decimal_places=RATE_DECIMAL_PLACES, null=True, blank=True
    )
    taker_rate = models.DecimalField(
        max_digits=RATE_MAX_DIGITS, decimal_places=RATE_DECIMAL_PLACES, null=True, blank=True
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    memo = models.TextField()

    class Meta(MakerCheckerDraft.Meta):
        permissions = [("approve_feechange", "Can approve or reject fee schedule changes")]
        constraints = [
            *_maker_checker_constraints("fee_change"),
            models.CheckConstraint(
                condition=Q(kind="create", maker_rate__isnull=False, taker_rate__isnull=False) & ~Q(name="")
                | Q(kind="rates", schedule__isnull=False, maker_rate__isnull=False, taker_rate__isnull=False)
                | Q(kind="make_default", schedule__isnull=False)
                | Q(kind="assign_tier", user__isnull=False),
                name="fee_change_kind_has_its_fields",
            ),
            models.CheckConstraint(  # nobody drafts or decides their own fee tier (migration 0011: NOT VALID)
                condition=~Q(user=F("created_by")) & ~Q(user=F("decided_by")), name="fee_change_not_own_tier"
            ),
        ]

    def __str__(self) -> str:
        return f"Fee change #{self.id}: {self.get_kind_display().lower()} ({self.get_status_display()})"


class MarketChange(MakerCheckerDraft):
    """New filters of a market, drafted by one operator with a ``memo`` (why) and applied when another approves
    (maker-checker): the quantity limits, the minimum notional and market orders' price protection
    (``market_order_price_band``, percent; empty removes it), as :func:`apps.orders.services.market_filters_update`
    takes them. Break-it review: one operator could empty the price band, letting a market order sweep the book, or
    raise the minimum quantity above every trader's orders, with no reason asked and nobody else looking. Tick,
    step and assets never change. One draft per market awaits a decision at a time."""

    market = models.ForeignKey(Market, on_delete=models.PROTECT, related_name="+")
    min_qty = AmountField()
    max_qty = AmountField()
    min_notional = AmountField()
    market_order_price_band = models.DecimalField(max_digits=5, decimal_places=2, null=True, blank=True)
    memo = models.TextField()

    class Meta(MakerCheckerDraft.Meta):
        verbose_name = "market filters change"
        permissions = [("approve_marketchange", "Can approve or reject changes of a market's filters")]
        constraints = [
            *_maker_checker_constraints("market_change"),
            models.UniqueConstraint(
                fields=["market"], condition=Q(status=ChangeStatus.DRAFT), name="market_change_one_pending"
            ),
        ]

    def __str__(self) -> str:
        return f"Market filters change #{self.id} of {self.market} ({self.get_status_display()})"


class SecondFactorReset(MakerCheckerDraft):
    """Removing a customer's second factor (all their one-time password devices), requested by one
    operator with a ``reason`` and done when another approves (maker-checker)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    reason = models.TextField()

    class Meta(MakerCheckerDraft.Meta):
        verbose_name = "second-factor reset"
        permissions = [("approve_secondfactorreset", "Can approve or reject second-factor resets")]
        constraints = [
            *_maker_checker_constraints("second_factor_reset"),
            models.CheckConstraint(condition=~Q(user=F("created_by")), name="second_factor_reset_not_own"),
        ]

    def __str__(self) -> str:
        return f"Second-factor reset #{self.id} of {self.user} ({self.get_status_display()})"


class WithdrawalsUnblock(MakerCheckerDraft):
    """Lifting a customer's withdrawals block, requested by one operator with a ``reason`` and done when another
    approves (maker-checker): it lets money out of an account someone judged at risk (break-it review: one operator
    lifted a block set against an account takeover, and the customer's withdrawal went out at once). Setting a block
    stays one operator's protective step."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    reason = models.TextField()

    class Meta(MakerCheckerDraft.Meta):
        verbose_name = "withdrawals unblock"
        permissions = [("approve_withdrawalsunblock", "Can approve or reject lifting a withdrawals block")]
        constraints = [
            *_maker_checker_constraints("withdrawals_unblock"),
            models.CheckConstraint(condition=~Q(user=F("created_by")), name="withdrawals_unblock_not_own"),
            models.UniqueConstraint(
                fields=["user"], condition=Q(status=ChangeStatus.DRAFT), name="withdrawals_unblock_one_pending"
            ),
        ]

    def __str__(self) -> str:
        return f"Withdrawals unblock #{self.id} of {self.user} ({self.get_status_display()})"


class WithdrawalApproval(Withdrawal):
    """The approval queue: withdrawals awaiting an operator's decision, and approved ones held back by a block
    (a proxy of wallets' Withdrawal; :func:`apps.wallets.selectors.withdrawals_to_decide`)."""

    class Meta:
        proxy = True
        verbose_name = "withdrawal awaiting approval"
        verbose_name_plural = "withdrawal approval queue"


class Customer(User):
    """The customer screen: a user with balances, orders, deposits, withdrawals, log-ins and restrictions
    (a proxy of the user model)."""

    class Meta:
        proxy = True
        verbose_name = "customer"
