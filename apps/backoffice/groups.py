"""Operator groups and their permissions, created by migrations (``sync_groups``).

- ``operators``: staff who browse the ledger, run reconciliation, draft adjustments,
  halt and resume markets and follow deposits and withdrawals;
- ``approvers``: may also approve withdrawals and other operators' adjustments (a
  second factor is required for them in the admin).

A permission of an app that is not installed yet is skipped; later migrations call
:func:`sync_groups` again.
"""

GROUP_PERMISSIONS: dict[str, list[str]] = {
    "operators": [
        "ledger.view_asset",
        "ledger.view_account",
        "ledger.view_journalentry",
        "ledger.view_posting",
        "backoffice.view_reconciliationrun",
        "backoffice.run_reconciliation",
        "backoffice.view_adjustment",
        "backoffice.add_adjustment",
        "backoffice.view_auditlogentry",
        "orders.view_market",
        "orders.change_market",
        "orders.view_order",
        "orders.view_trade",
        "orders.view_feeschedule",
        "orders.change_feeschedule",
        "orders.add_feeschedule",
        "wallets.view_deposit",
        "wallets.view_withdrawal",
        "wallets.view_custodyevent",
        "wallets.view_depositaddress",
        "backoffice.view_withdrawalapproval",
        "ledger.view_journalblock",
        "ledger.view_signingkey",
        "proofs.view_liabilitysnapshot",
    ],
    "approvers": ["backoffice.approve_adjustment", "wallets.approve_withdrawal"],
}


def sync_groups(apps, schema_editor=None) -> None:
    """Create the groups and grant them every listed permission that exists (a RunPython function)."""
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in GROUP_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=name)
        for dotted in codenames:
            app_label, codename = dotted.split(".")
            permission = Permission.objects.filter(content_type__app_label=app_label, codename=codename).first()
            if permission is not None:
                group.permissions.add(permission)
