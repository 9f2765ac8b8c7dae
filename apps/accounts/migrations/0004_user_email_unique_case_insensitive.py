"""No two users with one e-mail address, whatever its case (empty addresses stay allowed, many times).

``auth.User`` is Django's model, so the index is declared here, in SQL. It fails on a database that already
holds two users with one address: give one of them another address (or none) first.
"""

from django.db import migrations

# apps.accounts.models.EMAIL_UNIQUE_INDEX (a migration keeps its own copy of the name).
EMAIL_UNIQUE_INDEX = "auth_user_email_lower_unique"


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_account_restriction"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.RunSQL(
            sql=f"CREATE UNIQUE INDEX {EMAIL_UNIQUE_INDEX} ON auth_user (lower(email)) WHERE email <> ''",
            reverse_sql=f"DROP INDEX {EMAIL_UNIQUE_INDEX}",
        ),
    ]
