"""The traders' password pages: change it (signed in, the current one first), and reset it by an e-mailed link.

Django's views and forms do the work (old password, validators, single-use links, other sessions logged
out); each change is audited in its own transaction and e-mailed to the trader
(:func:`apps.accounts.password_resets.password_change_record`). Reset requests are limited per client IP
(``PASSWORD_RESET_RATE_PER_IP``), as each one may send an e-mail.
"""

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.db import transaction
from django.urls import reverse_lazy

from apps.accounts.password_resets import (
    CHANGED,
    RESET,
    PasswordChangeForm,
    PasswordResetForm,
    SetPasswordForm,
    password_change_record,
)
from apps.api.throttles import PasswordResetRateThrottle

from .throttled import ThrottledPostMixin


class PasswordChangeView(auth_views.PasswordChangeView):
    """``/accounts/password/change/``: the current password, then the new one twice; back to the security page."""

    form_class = PasswordChangeForm
    template_name = "registration/password_change.html"
    success_url = reverse_lazy("web:security")

    def get_form_kwargs(self):
        return {**super().get_form_kwargs(), "request": self.request}

    @transaction.atomic
    def form_valid(self, form):
        response = super().form_valid(form)  # keeps this session logged in; every other one is logged out
        password_change_record(user_id=form.user.pk, action=CHANGED)
        messages.success(self.request, "Password changed: your other sessions are logged out.")
        return response


class PasswordResetView(ThrottledPostMixin, auth_views.PasswordResetView):
    """``/accounts/password/reset/``: an address to send a reset link to; the answer never says whether an account
    has it. 429 past the per-IP rate."""

    form_class = PasswordResetForm
    template_name = "registration/password_reset.html"
    success_url = reverse_lazy("password-reset-sent")
    throttle = PasswordResetRateThrottle
    throttled_message = "Too many reset requests from your network: try again later."


class PasswordResetSentView(auth_views.PasswordResetDoneView):
    template_name = "registration/password_reset_sent.html"


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    """The e-mailed link: a new password twice (an invalid or used link says so); then the log-in page."""

    template_name = "registration/password_reset_confirm.html"
    success_url = reverse_lazy("login")
    form_class = SetPasswordForm

    @transaction.atomic
    def form_valid(self, form):
        response = super().form_valid(form)
        password_change_record(user_id=form.user.pk, action=RESET)
        messages.success(self.request, "Password changed: log in with the new one.")
        return response
