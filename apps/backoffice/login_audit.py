"""Log-ins, failed log-ins and second-factor enrolments in the audit log (Django's signals, django-otp devices).

Connected in :meth:`apps.backoffice.apps.BackofficeConfig.ready`. Every row is on the object
``auth.user`` / the user's id (a failed log-in with an unknown username has no object id), with
the client's address as django-axes sees it (so the same trusted-proxy rule applies) and its
user agent. The customer screen lists them (:func:`apps.backoffice.selectors.logins_for_user`).
"""

from axes.helpers import get_client_ip_address
from django.contrib.auth import get_user_model

from apps.audit.models import AuditLogEntry
from apps.audit.services import audit_record

USER_AGENT_MAX = 300


def _client(request) -> dict:
    if request is None:
        return {"ip": None, "user_agent": ""}
    return {
        "ip": get_client_ip_address(request),
        "user_agent": request.META.get("HTTP_USER_AGENT", "")[:USER_AGENT_MAX],
    }


def record_login(sender, request, user, **kwargs) -> None:
    """``user_logged_in``: a session log-in (web, admin)."""
    audit_record(
        actor_id=user.id,
        action="login",
        object_type="auth.user",
        object_id=user.id,
        before={},
        after=_client(request),
    )


def record_login_failed(sender, credentials, request=None, **kwargs) -> None:
    """``user_login_failed``: wrong credentials or a locked-out log-in, on any path that authenticates."""
    username = str(credentials.get("username") or "")[:150]
    user_id = get_user_model().objects.filter(username=username).values_list("id", flat=True).first()
    audit_record(
        actor_id=None,
        action="login_failed",
        object_type="auth.user",
        object_id=user_id if user_id is not None else "",
        before={},
        after={**_client(request), "username": username},
    )


def record_second_factor_enrolment(sender, instance, **kwargs) -> None:
    """``post_save`` of a django-otp device: the first save that finds it confirmed is its enrolment.

    Devices are saved again on every verification; the audit log itself remembers which
    devices were recorded, so each enrolment is recorded once, whichever code path confirmed it.
    """
    if not instance.confirmed:
        return
    recorded = AuditLogEntry.objects.filter(
        action="second_factor.enrol",
        object_type="auth.user",
        object_id=str(instance.user_id),
        after__device=instance.persistent_id,
    )
    if recorded.exists():
        return
    audit_record(
        actor_id=instance.user_id,
        action="second_factor.enrol",
        object_type="auth.user",
        object_id=instance.user_id,
        before={},
        after={"device": instance.persistent_id, "type": instance._meta.verbose_name, "name": instance.name},
    )
