"""Withdrawal.handed_over: whether custody may have the withdrawal. Until now ``submit_attempts > 0`` stood for it,
so existing rows take that value."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('wallets', '0003_custody_event_status_choices_and_claim_index'),
    ]

    operations = [
        migrations.AddField(
            model_name='withdrawal',
            name='handed_over',
            field=models.BooleanField(default=False, help_text='Custody may have it: handed over, and custody has not answered that it never received it.'),
        ),
        migrations.AlterField(
            model_name='withdrawal',
            name='submit_attempts',
            field=models.PositiveIntegerField(default=0, help_text='How many times it was handed to custody.'),
        ),
        migrations.RunSQL(
            "UPDATE wallets_withdrawal SET handed_over = true WHERE submit_attempts > 0",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
