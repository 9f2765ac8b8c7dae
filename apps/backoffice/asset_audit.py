"""Assets created or changed in the admin, in the audit log (the ledger's :data:`apps.ledger.events.asset_saved`).

Connected in :meth:`apps.backoffice.apps.BackofficeConfig.ready`; the row is written in the save's transaction.
"""

from apps.audit.services import audit_record


def record_asset_saved(
    sender, *, actor_id: int, asset_id: int, created: bool, before: dict, after: dict, reason: str, **kwargs
) -> None:
    """``asset.create`` / ``asset.change`` on ``ledger.asset``: the settings before and after, and the reason."""
    audit_record(
        actor_id=actor_id,
        action="asset.create" if created else "asset.change",
        object_type="ledger.asset",
        object_id=asset_id,
        before=before,
        after={**after, "reason": reason},
    )
