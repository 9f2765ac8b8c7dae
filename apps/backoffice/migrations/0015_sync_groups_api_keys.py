from django.db import migrations

from apps.backoffice.groups import sync_groups


class Migration(migrations.Migration):
    """Operators may list customers' API keys and revoke them (``accounts.view_apikey``, ``accounts.revoke_apikey``)."""

    dependencies = [
        ("backoffice", "0014_triggers_enabled_always"),
        ("accounts", "0006_api_key_revoke_permission"),
    ]

    operations = [migrations.RunPython(sync_groups, migrations.RunPython.noop)]
