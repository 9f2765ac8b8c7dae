"""Operator groups and their permissions, created by migrations (``sync_groups``).

- ``operators``: staff who browse the ledger, run reconciliation, draft adjustments, fee changes and changes
  of a market's filters, halt and resume markets, cancel a customer's open orders, follow deposits and
  withdrawals, on the customer screen freeze trading, block withdrawals and request lifting a block or a
  second-factor reset, and list customers' API keys and revoke them (a protective step like a freeze, taken at
  once, not maker-checker);
- ``approvers``: may also approve withdrawals and other operators' adjustments, fee changes, market filter
  changes, second-factor resets and requests to lift a withdrawals block (a second factor is required for them
  in the admin).

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
        "audit.view_auditlogentry",
        "orders.view_market",
        "orders.change_market",
        "orders.view_order",
        "orders.cancel_order",
        "orders.view_trade",
        "orders.view_feeschedule",
        "backoffice.view_feechange",
        "backoffice.add_feechange",
        "backoffice.view_marketchange",
        "backoffice.add_marketchange",
        "backoffice.view_customer",
        "backoffice.view_secondfactorreset",
        "backoffice.add_secondfactorreset",
        "accounts.view_accountrestriction",
        "accounts.change_accountrestriction",
        "accounts.view_apikey",
        "accounts.revoke_apikey",
        "wallets.view_deposit",
        "wallets.view_withdrawal",
        "wallets.view_custodyevent",
        "wallets.view_depositaddress",
        "backoffice.view_withdrawalapproval",
        "ledger.view_journalblock",
        "ledger.view_signingkey",
        "proofs.view_liabilitysnapshot",
    ],
    "approvers": [
        "backoffice.approve_adjustment",
        "wallets.approve_withdrawal",
        "backoffice.approve_feechange",
        "backoffice.approve_marketchange",
        "backoffice.approve_secondfactorreset",
        "backoffice.approve_withdrawalsunblock",
    ],
}

# Permissions the groups once had and lose (a later migration takes them away): fee schedules change
# only through maker-checker fee changes now.
REVOKED_PERMISSIONS: dict[str, list[str]] = {
    "operators": ["orders.change_feeschedule", "orders.add_feeschedule"],
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


def revoke_permissions(apps, schema_editor=None) -> None:
    """Take :data:`REVOKED_PERMISSIONS` away from their groups (a RunPython function)."""
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in REVOKED_PERMISSIONS.items():
        group = Group.objects.filter(name=name).first()
        for dotted in codenames:
            app_label, codename = dotted.split(".")
            permission = Permission.objects.filter(content_type__app_label=app_label, codename=codename).first()
            if group is not None and permission is not None:
                group.permissions.remove(permission)
