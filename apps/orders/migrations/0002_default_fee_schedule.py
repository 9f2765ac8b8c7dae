"""The default fee schedule of SCENARIOS.md: maker 0.1 %, taker 0.1 % (operators change it in the admin)."""

from decimal import Decimal

from django.db import migrations


def create_default(apps, schema_editor):
    FeeSchedule = apps.get_model("orders", "FeeSchedule")
    if not FeeSchedule.objects.filter(is_default=True).exists():
        FeeSchedule.objects.create(
            name="default", maker_rate=Decimal("0.001"), taker_rate=Decimal("0.001"), is_default=True
        )


class Migration(migrations.Migration):
    dependencies = [("orders", "0001_initial")]

    operations = [migrations.RunPython(create_default, migrations.RunPython.noop)]
