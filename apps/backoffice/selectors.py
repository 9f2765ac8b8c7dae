"""Reads of the back office: a customer's log-ins and second factor, pending maker-checker requests."""

from django.db.models import QuerySet
from django_otp import devices_for_user

from .models import AuditLogEntry, ChangeStatus, SecondFactorReset

LOGIN_ACTIONS = ("login", "login_failed")


def logins_for_user(*, user_id: int, limit: int = 20) -> list[AuditLogEntry]:
    """The user's latest log-ins and failed log-ins (audit log rows on ``auth.user``), newest first.

    ``after`` holds ``ip``, ``user_agent`` and, for a failure, the ``username`` tried.
    """
    return list(
        AuditLogEntry.objects.filter(
            object_type="auth.user", object_id=str(user_id), action__in=LOGIN_ACTIONS
        ).order_by("-created_at", "-id")[:limit]
    )


def second_factor_devices(*, user) -> list[dict]:
    """The user's one-time password devices: ``[{"name", "type", "confirmed"}]`` (every django-otp device type)."""
    return [
        {"name": device.name, "type": device._meta.verbose_name, "confirmed": device.confirmed}
        for device in devices_for_user(user, confirmed=None)
    ]


def second_factor_resets_for_user(*, user_id: int) -> QuerySet[SecondFactorReset]:
    """Resets of the user's second factor, newest first (at most one awaits a decision)."""
    return SecondFactorReset.objects.filter(user_id=user_id).select_related("created_by", "decided_by")


def pending_second_factor_reset(*, user_id: int) -> SecondFactorReset | None:
    """The reset of the user's second factor that awaits a decision, if any."""
    return second_factor_resets_for_user(user_id=user_id).filter(status=ChangeStatus.DRAFT).first()
