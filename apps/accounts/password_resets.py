"""What follows a trader's password change or reset (the change itself is Django's forms and views): the audit
row, in the change's transaction, and the e-mail telling the account's address once it commits.

Django logs out every other session of the account by itself: a session keeps the hash of the password it
logged in with, and a new password no longer matches it (``SessionAuthenticationMiddleware``'s check, on by
default). The reset link is Django's too (``PasswordResetTokenGenerator``: single use, since it hashes the
password and the last log-in; valid ``PASSWORD_RESET_TIMEOUT`` seconds); :class:`PasswordResetForm` only
sends it the way every message of ours goes (:mod:`apps.accounts.notifications`).
"""

from django.conf import settings
from django.contrib.auth import forms as auth_forms
from django.urls import reverse
from django.utils import timezone

from apps.audit.services import audit_record

from .notifications import email_address_on_commit, email_user_on_commit, site_url

CHANGED, RESET = "password.changed", "password.reset"


def password_change_record(*, user_id: int, action: str) -> None:
    """Audit ``action`` (:data:`CHANGED` by the signed-in trader, :data:`RESET` by an e-mailed link) with the trader
    as actor, and e-mail them (``emails/password_changed.txt``) when the caller's transaction commits. Call it in
    the transaction that set the password. Raises nothing of its own."""
    audit_record(actor_id=user_id, action=action, object_type="auth.user", object_id=user_id, before={}, after={})
    email_user_on_commit(user_id=user_id, template="password_changed", context={"time": timezone.now()})


class PasswordResetForm(auth_forms.PasswordResetForm):
    """Django's reset request (the same answer whether or not an account has the address; accounts with no
    usable password are left out), its link sent as ``emails/password_reset.txt`` through the Celery queue."""

    def send_mail(
        self, subject_template_name, email_template_name, context, from_email, to_email, html_email_template_name=None
    ):
        link = site_url(reverse("password-reset-confirm", args=[context["uid"], context["token"]]))
        hours = settings.PASSWORD_RESET_TIMEOUT // 3600
        message = {"username": context["user"].get_username(), "link": link, "hours": hours}
        email_address_on_commit(to=to_email, template="password_reset", context=message)
