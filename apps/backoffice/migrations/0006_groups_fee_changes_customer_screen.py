from django.db import migrations

from apps.backoffice.groups import revoke_permissions, sync_groups


class Migration(migrations.Migration):
    """Operators draft fee changes and restrict customers; approvers decide fee changes and second-factor
    resets; operators no longer add or change fee schedules directly (hole 5)."""

    dependencies = [
        ("backoffice", "0005_fee_changes_second_factor_resets_customers"),
        ("accounts", "0003_account_restriction"),
    ]

    operations = [
        migrations.RunPython(sync_groups, migrations.RunPython.noop),
        migrations.RunPython(revoke_permissions, migrations.RunPython.noop),
    ]
