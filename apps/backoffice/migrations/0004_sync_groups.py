from django.db import migrations

from apps.backoffice.groups import sync_groups


class Migration(migrations.Migration):
    """Grant the operator groups the permissions of the orders and wallets apps (and the approval queue)."""

    dependencies = [
        ("backoffice", "0003_withdrawal_approval_queue"),
        ("wallets", "0001_initial"),
        ("orders", "0002_default_fee_schedule"),
    ]

    operations = [migrations.RunPython(sync_groups, migrations.RunPython.noop)]
