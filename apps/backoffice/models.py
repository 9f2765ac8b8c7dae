"""The operators' records: reconciliation runs, manual adjustments under maker-checker, the audit log."""

import pgtrigger
from django.conf import settings
from django.db import models
from django.db.models import F, Q

from apps.ledger.models import JournalEntry
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
        triggers = [pgtrigger.Protect(name="append_only", operation=pgtrigger.Update | pgtrigger.Delete)]

    def __str__(self) -> str:
        return f"Reconciliation {self.started_at:%Y-%m-%d %H:%M:%S} {'passed' if self.ok else 'FAILED'}"

    @property
    def failed_checks(self) -> list[dict]:
        return [check for check in self.report.get("checks", []) if not check["ok"]]


class AdjustmentStatus(models.TextChoices):
    DRAFT = "draft", "Awaiting approval"
    APPROVED = "approved", "Approved and posted"
    REJECTED = "rejected", "Rejected"
    WITHDRAWN = "withdrawn", "Withdrawn by its author"


class Adjustment(models.Model):
    """A manual adjustment drafted by one operator and approved by another (maker-checker).

    ``legs`` is ``[{"account": id, "amount": "signed decimal"}]`` (debit positive), balanced
    per asset with an ``equity`` leg; it is posted through the ledger only when approved
    (``entry`` then references the journal entry). Its author may withdraw it while it is a draft
    (``decided_at`` is then when; nothing is posted).
    """

    memo = models.TextField()
    legs = models.JSONField()
    status = models.CharField(max_length=16, choices=AdjustmentStatus.choices, default=AdjustmentStatus.DRAFT)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)
    entry = models.OneToOneField(JournalEntry, null=True, blank=True, on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["-created_at"]
        permissions = [("approve_adjustment", "Can approve or reject manual adjustments")]
        constraints = [
            models.CheckConstraint(condition=~Q(decided_by=F("created_by")), name="adjustment_checker_is_not_maker"),
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


class AuditLogEntry(models.Model):
    """Who did what to which object, when, with its state before and after. Append-only."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    before = models.JSONField(default=dict)
    after = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "audit log"
        indexes = [models.Index(fields=["object_type", "object_id"], name="audit_object")]
        triggers = [pgtrigger.Protect(name="append_only", operation=pgtrigger.Update | pgtrigger.Delete)]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.object_type} {self.object_id}"


class WithdrawalApproval(Withdrawal):
    """The approval queue: withdrawals awaiting an operator's decision (a proxy of wallets' Withdrawal)."""

    class Meta:
        proxy = True
        verbose_name = "withdrawal awaiting approval"
        verbose_name_plural = "withdrawal approval queue"
