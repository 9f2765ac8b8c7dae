from django.db import migrations

from apps.backoffice.groups import sync_groups


class Migration(migrations.Migration):
    """Grant the operator groups the permissions of the wallets app (and the approval queue)."""

    dependencies = [
        ("backoffice", "0003_withdrawal_approval_queue"),
        ("wallets", "0001_initial"),
    ]

    operations = [migrations.RunPython(sync_groups, migrations.RunPython.noop)]
