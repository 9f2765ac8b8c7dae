"""Log-in lockouts (django-axes): what a locked-out log-in gets, and the account-level lock across addresses.

django-axes locks a username from one address after ``AXES_FAILURE_LIMIT`` failures
(``AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]``). Several parameter sets can be given, but axes
compares the largest count among them with the one ``AXES_FAILURE_LIMIT`` (``get_failure_limit`` is told the
request and credentials, never which set counted): it cannot lock one address at 5 and the account, whatever
the address, at a higher count. :class:`AccountLockoutHandler` adds that second limit to axes' own database
handler (``AXES_HANDLER``), counting axes' own ``AccessAttempt`` rows.
"""

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_cool_off
from axes.models import AccessAttempt
from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Sum
from django.http import JsonResponse
from django.shortcuts import render
from django.utils import timezone

from apps.audit.services import audit_record

from .notifications import email_user_on_commit, login_details

MESSAGE = "Too many failed log-ins. Try again later."


def lockout_response(request, original_response=None, credentials=None):
    if request.path_info.startswith("/api/"):
        return JsonResponse({"error": {"code": "rate_limited", "message": MESSAGE, "fields": {}}}, status=429)
    return render(request, "registration/locked.html", {"message": MESSAGE}, status=429)


class AccountLockoutHandler(AxesDatabaseHandler):
    """axes' database handler plus a lock per account: ``AXES_ACCOUNT_FAILURE_LIMIT`` failed log-ins of one
    username within the cool-off (``AXES_COOLOFF_TIME``), from any addresses, refuse every password log-in of
    that username (right password included) wherever ``authenticate`` runs, until the cool-off has passed since
    the latest of them (OWASP Authentication Cheat Sheet "Account Lockout", ASVS 2.2.1).

    The limit is set above the per-address one, and each address counts at most that one, so that one address
    alone cannot lock the owner out (it is locked out itself first). The refusal is axes' own lockout (``AXES_LOCKOUT_CALLABLE``: 429, ``rate_limited``
    on the API); failures while locked still count, as axes counts them. The failure that first reaches the
    limit writes an audit row ``login_locked`` and e-mails the owner (``emails/account_locked.txt``), both in
    its transaction; an unknown username is locked alike, with nobody to tell.
    """

    def is_locked(self, request, credentials: dict | None = None) -> bool:
        """axes' lock of this (username, address), or the account's lock (see the class)."""
        return (
            super().is_locked(request, credentials)
            or self.account_failures(request, credentials) >= settings.AXES_ACCOUNT_FAILURE_LIMIT
        )

    def account_failures(self, request, credentials: dict | None = None) -> int:
        """Failed log-ins of the request's username within the cool-off, summed over every address, each address
        counting at most ``AXES_FAILURE_LIMIT`` (where it is locked out itself): failures sent from an address
        already locked out still reached the account's limit alone, and locked the owner out everywhere (break-it
        review)."""
        username = get_client_username(request, credentials)
        if not username:
            return 0
        attempts = AccessAttempt.objects.filter(username=username, attempt_time__gte=get_cool_off_threshold(request))
        per_address = attempts.values("ip_address").annotate(failures=Sum("failures_since_start"))
        return sum(min(row["failures"], settings.AXES_FAILURE_LIMIT) for row in per_address)

    def user_login_failed(self, sender, credentials: dict, request=None, **kwargs) -> None:
        """Record the failure as axes does; at or past the account's limit, answer it with the lockout, and tell
        the owner when this failure is the one that reached it.

        The user's row is locked (``SELECT ... FOR UPDATE``) around the count, so concurrent failures of one
        account are counted one after another and exactly one of them reaches the limit. A username longer than
        any account's is not recorded (the audit log still has the failure).
        """
        if request is None:
            super().user_login_failed(sender, credentials, request, **kwargs)
            return
        username = get_client_username(request, credentials)
        longest = get_user_model()._meta.get_field("username").max_length
        if longest is not None and len(username or "") > longest:
            # No account has such a name, so there is none to lock; axes' row could not hold it either (a 500 on a
            # 256-character username: break-it review). The log-in rate per address still applies.
            return
        limit = settings.AXES_ACCOUNT_FAILURE_LIMIT
        with transaction.atomic():
            user_id = (
                get_user_model().objects.select_for_update().filter(username=username).values_list("id", flat=True)
            ).first()
            before = self.account_failures(request, credentials)
            super().user_login_failed(sender, credentials, request, **kwargs)
            after = self.account_failures(request, credentials)
            if after >= limit and not request.axes_locked_out:
                request.axes_locked_out = True
                request.axes_credentials = credentials
                user_locked_out.send("axes", request=request, username=username, ip_address=request.axes_ip_address)
            if user_id is not None and before < limit <= after:
                _account_locked(request, user_id=user_id, username=username, failures=after)


def _account_locked(request, *, user_id: int, username: str, failures: int) -> None:
    """Audit and tell the owner that their account's log-in is locked (in the caller's transaction)."""
    cool_off = get_cool_off(request)
    minutes = int(cool_off.total_seconds() // 60) if cool_off is not None else 0
    details = login_details(request)
    audit_record(
        actor_id=None,
        action="login_locked",
        object_type="auth.user",
        object_id=user_id,
        before={},
        after={
            "ip": details["ip_address"],
            "user_agent": details["user_agent"],
            "username": username,
            "failures": failures,
            "cool_off_minutes": minutes,
        },
    )
    email_user_on_commit(
        user_id=user_id,
        template="account_locked",
        context={"time": timezone.now(), "failures": failures, "minutes": minutes, **details},
    )
