"""The audit log's one writer, :func:`audit_record`: every app records operators' and users' security-relevant
actions with it, in the transaction of the action it records."""

from .models import AuditLogEntry


def audit_record(
    *, actor_id: int | None, action: str, object_type: str, object_id: object, before: dict, after: dict
) -> AuditLogEntry:
    """Append who did ``action`` to ``object_type`` ``object_id``, with its state before and after (JSON-able dicts).

    ``actor_id`` is None only for what nobody signed in did (a failed log-in, a withdrawals block the system set). Runs in the caller's transaction
    (the audited change and its row commit or roll back together); the table is append-only (a trigger).
    """
    return AuditLogEntry.objects.create(
        actor_id=actor_id, action=action, object_type=object_type, object_id=str(object_id), before=before, after=after
    )
