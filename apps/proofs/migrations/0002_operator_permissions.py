from django.db import migrations

from apps.backoffice.groups import sync_groups


class Migration(migrations.Migration):
    """Grant the operators group the views of the sealed journal's blocks and keys and of the snapshots."""

    dependencies = [
        ("proofs", "0001_liabilities_snapshots"),
        ("ledger", "0002_sealed_journal"),
        ("backoffice", "0004_sync_groups"),
    ]

    operations = [migrations.RunPython(sync_groups, migrations.RunPython.noop)]
