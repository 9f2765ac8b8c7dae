from django.db import migrations

from apps.backoffice.groups import sync_groups


class Migration(migrations.Migration):
    """Operators see the audit log in its own app (``audit.view_auditlogentry``)."""

    dependencies = [
        ("backoffice", "0008_delete_auditlogentry"),
        ("audit", "0001_initial"),
    ]

    operations = [migrations.RunPython(sync_groups, migrations.RunPython.noop)]
