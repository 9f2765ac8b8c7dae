from django.db import migrations

from apps.backoffice.groups import sync_groups


class Migration(migrations.Migration):
    dependencies = [
        ("backoffice", "0001_initial"),
        ("ledger", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(sync_groups, migrations.RunPython.noop)]
