import django.db.models.deletion
import pgtrigger.compiler
import pgtrigger.migrations
from django.conf import settings
from django.db import migrations, models


def content_type_move(apps, schema_editor):
    """The back office's content type of the model becomes the audit app's, with its permissions (the operators'
    group keeps ``view_auditlogentry``; on a new database the back office's 0009 grants it)."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label="audit", model="auditlogentry").exists():
        ContentType.objects.filter(app_label="backoffice", model="auditlogentry").update(app_label="audit")


def content_type_move_back(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="audit", model="auditlogentry").update(app_label="backoffice")


class Migration(migrations.Migration):
    """The audit log, moved from the back office with its rows: the table is renamed, not copied."""

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("contenttypes", "0002_remove_content_type_name"),
        ("backoffice", "0008_delete_auditlogentry"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    "ALTER TABLE backoffice_auditlogentry RENAME TO audit_auditlogentry",
                    "ALTER TABLE audit_auditlogentry RENAME TO backoffice_auditlogentry",
                )
            ],
            state_operations=[
        migrations.CreateModel(
            name='AuditLogEntry',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('action', models.CharField(max_length=64)),
                ('object_type', models.CharField(max_length=64)),
                ('object_id', models.CharField(max_length=64)),
                ('before', models.JSONField(default=dict)),
                ('after', models.JSONField(default=dict)),
                ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                ('actor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name_plural': 'audit log',
                'ordering': ['-created_at'],
                'indexes': [models.Index(fields=['object_type', 'object_id'], name='audit_object')],
            },
        ),
            ],
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='auditlogentry',
            trigger=pgtrigger.compiler.Trigger(name='append_only', sql=pgtrigger.compiler.UpsertTriggerSql(func="RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;", hash='c208af04859d8f160ba17b1259695620cdd510a5', operation='UPDATE OR DELETE', pgid='pgtrigger_append_only_18ce1', table='audit_auditlogentry', when='BEFORE')),
        ),
        migrations.RunPython(content_type_move, content_type_move_back),
    ]
