from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The audit log: one append-only table every app writes to, in the transaction of what it records."""

    name = "apps.audit"
    label = "audit"
    verbose_name = "Audit log"
