"""Nobody drafts or decides a change of their own fee tier (``fee_change_not_own_tier``).

Added ``NOT VALID``: PostgreSQL checks every row written from now on, and a change decided before this
migration stays as it was recorded (history is not rewritten, and the migration cannot fail on it).
"""

from django.conf import settings
from django.db import migrations, models

CONSTRAINT = models.CheckConstraint(
    condition=~models.Q(user=models.F("created_by")) & ~models.Q(user=models.F("decided_by")),
    name="fee_change_not_own_tier",
)


class Migration(migrations.Migration):
    dependencies = [
        ("backoffice", "0010_triggers_not_ignorable"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddConstraint(model_name="feechange", constraint=CONSTRAINT)],
            database_operations=[
                migrations.RunSQL(
                    sql="ALTER TABLE backoffice_feechange ADD CONSTRAINT fee_change_not_own_tier "
                    "CHECK (NOT (user_id = created_by_id) AND NOT (user_id = decided_by_id)) NOT VALID",
                    reverse_sql="ALTER TABLE backoffice_feechange DROP CONSTRAINT fee_change_not_own_tier",
                )
            ],
        )
    ]
