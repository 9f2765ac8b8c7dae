"""The outbox's writers ring the relay through Redis at their commit (``apps.core.doorbell``), so its NOTIFY
trigger goes: a NOTIFYing commit holds a server-wide lock until its commit record is flushed, and every
placement's commit waited behind the others' for it."""

import pgtrigger.migrations
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('streams', '0003_stream_token_api_key'),
    ]

    operations = [
        pgtrigger.migrations.RemoveTrigger(
            model_name='streamevent',
            name='notify_relay',
        ),
    ]
