from django.db import migrations

from apps.backoffice.groups import sync_groups


class Migration(migrations.Migration):
    """Operators may cancel a customer's open order (``orders.cancel_order``)."""

    dependencies = [
        ("backoffice", "0012_second_factor_reset_verbose_name"),
        ("orders", "0011_order_cancel_permission"),
    ]

    operations = [migrations.RunPython(sync_groups, migrations.RunPython.noop)]
