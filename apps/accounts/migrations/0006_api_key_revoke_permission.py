from django.db import migrations


class Migration(migrations.Migration):
    """Operators may revoke a customer's API key (``accounts.revoke_apikey``, the back office's API keys list)."""

    dependencies = [
        ('accounts', '0005_email_request'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='apikey',
            options={'ordering': ['-created_at'], 'permissions': [('revoke_apikey', "Can revoke a customer's API key")]},
        ),
    ]
