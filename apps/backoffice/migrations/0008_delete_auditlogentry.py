import pgtrigger.migrations
from django.db import migrations


class Migration(migrations.Migration):
    """The audit log moves to its own app (apps.audit, whose 0001 renames the table and takes its rows): here
    the model leaves the back office's state only, after its append-only trigger is dropped (audit's 0001
    installs it again under the new model's name)."""

    dependencies = [
        ("backoffice", "0007_adjustment_withdrawn_by_author"),
    ]

    operations = [
        pgtrigger.migrations.RemoveTrigger(model_name="auditlogentry", name="append_only"),
        migrations.SeparateDatabaseAndState(state_operations=[migrations.DeleteModel(name="AuditLogEntry")]),
    ]
