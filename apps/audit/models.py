"""The audit log's table. It sits below every app that records actions in it (accounts, orders, the back office)
and imports none of them (the import-linter layers in pyproject.toml)."""

from django.conf import settings
from django.db import models

from apps.core import triggers as enforced


class AuditLogEntry(models.Model):
    """Who did what to which object, when, with its state before and after. Append-only.

    ``actor`` is empty only for what nobody signed in did: a failed log-in, or a withdrawals block the system set on
    its own (a credited deposit reported failed).
    """

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
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
        triggers = [enforced.append_only("append_only")]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.object_type} {self.object_id}"
