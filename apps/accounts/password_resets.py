"""What follows a trader's password change or reset (the change itself is Django's forms and views): the audit
row, the pause of withdrawals and, after a reset, the revocation of the API keys, in the change's transaction, and
the e-mail telling the account's address once it commits.

Django logs out every other session of the account by itself: a session keeps the hash of the password it
logged in with, and a new password no longer matches it (``SessionAuthenticationMiddleware``'s check, on by
default). The reset link is Django's too (``PasswordResetTokenGenerator``: single use, since it hashes the
password and the last log-in; valid ``PASSWORD_RESET_TIMEOUT`` seconds); :class:`PasswordResetForm` only
sends it the way every message of ours goes (:mod:`apps.accounts.notifications`).
"""

import hashlib
import logging

import redis
from axes.utils import reset as axes_reset
from django import forms
from django.conf import settings
from django.contrib.auth import forms as auth_forms
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from apps.audit.services import audit_record
from apps.core.errors import DomainError
from apps.core.single_valued import SingleValuedForm

from .events import password_changed
from .holds import withdrawals_hold
from .models import HoldReason
from .notifications import email_address_on_commit, email_user_on_commit, site_url
from .reauthentication import password_is_right
from .second_factor import second_factor_check_if_enrolled, user_has_second_factor
from .services import api_keys_revoke_all

log = logging.getLogger(__name__)

CHANGED, RESET = "password.changed", "password.reset"


def password_change_record(*, user_id: int, action: str) -> None:
    """Audit ``action`` (:data:`CHANGED` by the signed-in trader, :data:`RESET` by an e-mailed link) with the trader
    as actor, pause the account's withdrawals (:func:`~apps.accounts.holds.withdrawals_hold`), after a reset revoke
    every API key (:func:`~apps.accounts.services.api_keys_revoke_all`: a reset means the old password may be known
    to someone else, who may have made keys with it) and end the account's log-in lock (django-axes' failures of
    its username: the e-mailed link proved the account is the trader's), announce it
    (:data:`~apps.accounts.events.password_changed`: the streams end the stream keys made in browser sessions), and
    e-mail the trader (``emails/password_changed.txt``) when the caller's transaction commits. Call it in the
    transaction that set the password. Raises nothing of its own."""
    reset = action == RESET
    audit_record(actor_id=user_id, action=action, object_type="auth.user", object_id=user_id, before={}, after={})
    held_until = withdrawals_hold(
        user_id=user_id, reason=HoldReason.PASSWORD_RESET if reset else HoldReason.PASSWORD_CHANGED, actor_id=user_id
    )
    revoked = api_keys_revoke_all(user_id=user_id) if reset else []
    password_changed.send(sender=get_user_model(), user_id=user_id, reset=reset)
    if reset:  # the e-mailed link proved the account is the owner's: the failures that locked it no longer count
        axes_reset(username=get_user_model().objects.get(pk=user_id).get_username())
    email_user_on_commit(
        user_id=user_id,
        template="password_changed",
        context={"time": timezone.now(), "reset": reset, "keys_revoked": len(revoked), "held_until": held_until},
    )


class SetPasswordForm(SingleValuedForm, auth_forms.SetPasswordForm):
    """Django's form of the e-mailed reset link's page (a new password twice), refusing a field sent twice."""


class PasswordChangeForm(SingleValuedForm, auth_forms.PasswordChangeForm):
    """Django's, the current password checked by ``authenticate`` (``request`` given), as a log-in's is: a wrong one
    counts as a failed log-in (django-axes), and a username locked out from the address is refused here too. Django's
    own form only compared it, so a stolen session could guess the password without limit (review).

    A user with a second factor also gives a current code (``otp``, or a recovery code), as Binance asks: the old
    password alone, with a session, changed it and logged the owner's other sessions out (break-it review). The code
    is checked last, once everything else is valid, so a refused form does not spend it."""

    def __init__(self, user, *args, request=None, **kwargs):
        self.request = request
        super().__init__(user, *args, **kwargs)
        if user_has_second_factor(user_id=user.pk):
            self.fields["otp"] = forms.CharField(
                max_length=32, label="Code from your authenticator app (or a recovery code)", strip=True
            )

    def clean(self):
        cleaned = super().clean()
        if "otp" in self.fields and not self.errors:
            try:
                second_factor_check_if_enrolled(user_id=self.user.pk, code=cleaned["otp"])
            except DomainError as refused:
                self.add_error("otp", refused.message)
        return cleaned

    def clean_old_password(self) -> str:
        old_password = self.cleaned_data["old_password"]
        if not password_is_right(self.request, password=old_password):
            raise ValidationError(self.error_messages["password_incorrect"], code="password_incorrect")
        return old_password


RESET_MAILS_PER_HOUR = 3
"""Reset links sent to one address in an hour, whoever asks (the form's per-IP rate does not stop many addresses
asking for one victim's); past it the request is answered alike and nothing is sent (logged)."""


def _reset_mail_allowed(address: str) -> bool:
    """Count a reset mail to ``address`` (in the cache, an hour); False past :data:`RESET_MAILS_PER_HOUR`. True when
    the cache cannot be reached: the link still goes out."""
    key = "password_reset_to:" + hashlib.sha256(address.lower().encode()).hexdigest()
    try:
        cache.add(key, 0, timeout=3600)
        return cache.incr(key) <= RESET_MAILS_PER_HOUR
    except (redis.RedisError, ValueError):  # ValueError: the count expired between add and incr
        log.warning("accounts.password_reset_count_unavailable", exc_info=True)
        return True


class PasswordResetForm(SingleValuedForm, auth_forms.PasswordResetForm):
    """Django's reset request (the same answer whether or not an account has the address; accounts with no
    usable password are left out), its link sent as ``emails/password_reset.txt`` through the Celery queue, at most
    :data:`RESET_MAILS_PER_HOUR` an hour to one address."""

    def send_mail(
        self, subject_template_name, email_template_name, context, from_email, to_email, html_email_template_name=None
    ):
        if not _reset_mail_allowed(to_email):
            log.warning("accounts.password_reset_not_sent", extra={"reason": "address_cap"})
            return
        link = site_url(reverse("password-reset-confirm", args=[context["uid"], context["token"]]))
        hours = settings.PASSWORD_RESET_TIMEOUT // 3600
        message = {"username": context["user"].get_username(), "link": link, "hours": hours}
        email_address_on_commit(to=to_email, template="password_reset", context=message)
