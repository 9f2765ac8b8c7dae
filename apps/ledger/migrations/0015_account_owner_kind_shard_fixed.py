"""An account's owner, kind and shard never change, as its id and asset never do: the sealed journal names accounts by
id, so an UPDATE of the owner moved a customer's balance to another customer and journal_verify still passed."""

import apps.core.triggers
import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0014_triggers_enabled_always'),
    ]

    operations = [
        pgtrigger.migrations.RemoveTrigger(
            model_name='account',
            name='keys_fixed',
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='account',
            trigger=pgtrigger.compiler.Trigger(name='keys_fixed', sql=apps.core.triggers.EnforcedAlwaysTriggerSql(condition='WHEN (OLD."id" IS DISTINCT FROM (NEW."id") OR OLD."asset_id" IS DISTINCT FROM (NEW."asset_id") OR OLD."owner_id" IS DISTINCT FROM (NEW."owner_id") OR OLD."kind" IS DISTINCT FROM (NEW."kind") OR OLD."shard" IS DISTINCT FROM (NEW."shard"))', func="RAISE EXCEPTION 'pgtrigger: Cannot update rows from % table', TG_TABLE_NAME;", hash='f2e385ccbb03e853ad534f242cdd59cfbde51249', operation='UPDATE', pgid='pgtrigger_keys_fixed_c4964', table='ledger_account', when='BEFORE')),
        ),
    ]
