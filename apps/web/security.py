"""The traders' security page: the account's e-mail address (changed by a link sent to the new one), and the
second factor (an authenticator app): turn it on, replace it, turn it off.

Enrolment shows the secret as a QR code rendered here as SVG (the ``qrcode`` package; no
JavaScript, nothing sent to a third party) and as base32 text; the recovery codes are shown
once, in the response that turns the second factor on.
"""

import qrcode
import qrcode.image.svg
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.safestring import mark_safe
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from apps.accounts.email_address import (
    email_address_confirm,
    email_change_approve,
    email_change_pending,
    email_confirmation_send,
    email_link_read,
    email_requests_cancel,
)
from apps.accounts.enrolment import (
    second_factor_confirm,
    second_factor_enrol,
    second_factor_pending,
    second_factor_remove,
)
from apps.accounts.reauthentication import password_confirm
from apps.accounts.second_factor import user_has_second_factor
from apps.accounts.selectors import email_request_open
from apps.accounts.session_second_factor import session_second_factor_keep
from apps.core.errors import DomainError

from .address_book import confirm_page
from .forms import EmailForm, OtpForm, SecondFactorStartForm, add_domain_error
from .refused import refused_form_keep, refused_form_pop

# The page's four forms; a refused one is kept for the next GET (post/redirect/get: a reload sends nothing).
START_FORM, CONFIRM_FORM, REMOVE_FORM = "security-start", "security-confirm", "security-remove"
EMAIL_FORM = "security-email"


def email_link_sent_message(email: str, *, current: str = "") -> str:
    """What the page says once a confirmation was asked for ``email`` (the same whoever has the address); ``current``
    the user's address, which approves the change first."""
    hours = settings.EMAIL_CONFIRMATION_MAX_AGE // 3600
    if current:
        return (
            f"We sent a message to your current address, {current}: open the link in it within {hours} hours to "
            f"approve the change. Then {email} gets a link that makes it your e-mail address."
        )
    return f"We sent a message to {email}: open the link in it within {hours} hours to make it your e-mail address."


def qr_code_svg(data: str) -> str:
    """``data`` as an inline SVG QR code (paths only: no script, no external reference)."""
    image = qrcode.make(data, image_factory=qrcode.image.svg.SvgPathImage, box_size=8)
    return image.to_string(encoding="unicode")


def _render(
    request, *, form=None, start_form=None, remove_form=None, email_form=None, recovery_codes=None, enrolment=None
):
    """The page; ``enrolment`` (the set-up just started) shows its secret and QR code, in that answer only."""
    context = {
        "email_form": email_form or EmailForm(),
        "email_request": email_request_open(user_id=request.user.id),
        "enabled": user_has_second_factor(user_id=request.user.id),
        "pending": second_factor_pending(user_id=request.user.id),
        "enrolment": enrolment,
        "qr_svg": mark_safe(qr_code_svg(enrolment.otpauth_url)) if enrolment else None,  # noqa: S308 (made here)
        "form": form or OtpForm(),
        "start_form": start_form or SecondFactorStartForm(),
        "remove_form": remove_form or OtpForm(),
        "recovery_codes": recovery_codes,
    }
    return render(request, "web/security.html", context)


@never_cache
@login_required
def security(request):
    """The second factor's state, and the confirmation of a set-up while one is pending (never its secret: that is
    shown once, in the answer to the POST that started it, :func:`second_factor_start`); a form refused on the last
    POST is shown again once, with its errors. ``Cache-Control: no-store`` (``never_cache``)."""
    return _render(
        request,
        form=refused_form_pop(request, key=CONFIRM_FORM, form_class=OtpForm),
        start_form=refused_form_pop(request, key=START_FORM, form_class=SecondFactorStartForm),
        remove_form=refused_form_pop(request, key=REMOVE_FORM, form_class=OtpForm),
        email_form=refused_form_pop(request, key=EMAIL_FORM, form_class=EmailForm),
    )


@login_required
@require_POST
def email_change_view(request):
    """Ask to change the e-mail address (a current code when the second factor is on, the password when it is off):
    a link to approve it goes to the current address, if any, else one to confirm it to the new one; the page says
    the same whether or not another account has the address."""
    form = EmailForm(request.POST)
    if form.is_valid():
        try:
            password_confirm(request, password=form.cleaned_data["password"])
            email = email_confirmation_send(
                user_id=request.user.id, email=form.cleaned_data["email"], otp=form.cleaned_data["otp"] or None
            )
        except DomainError as error:
            add_domain_error(form, error)
        else:
            messages.info(request, email_link_sent_message(email, current=request.user.email))
            return redirect("web:security")
    refused_form_keep(request, key=EMAIL_FORM, form=form)
    return redirect("web:security")


@login_required
@require_POST
def email_change_cancel_view(request):
    """Retire the pending change's link (a mistyped address): the account keeps its address."""
    email_requests_cancel(user_id=request.user.id)
    messages.info(request, "Cancelled: the link we sent no longer works, and your e-mail address is unchanged.")
    return redirect("web:security")


def email_approve_view(request, token: str):
    """The link e-mailed to the current address that approves a change of it (no log-in needed: the link is the
    proof); the new address is then sent its link."""
    return confirm_page(
        request, token, what="change of e-mail address", confirm=email_change_approve, read=email_change_pending
    )


def email_confirm_view(request, token: str):
    """The e-mailed link that sets the account's e-mail address (no log-in needed: the link is the proof)."""
    return confirm_page(request, token, what="e-mail address", confirm=email_address_confirm, read=email_link_read)


@never_cache
@login_required
@require_POST
def second_factor_start(request):
    """Begin enrolling an authenticator: with one on already, a current code from it is required; with none, the
    account's password (:func:`~apps.accounts.reauthentication.password_confirm`). The new secret and its QR code
    are shown in this answer only (no cache keeps it): a later page of the same session, a stolen cookie's
    included, shows only the confirmation form, so only who gave the password or code can confirm."""
    form = SecondFactorStartForm(request.POST)
    if form.is_valid():
        try:
            password_confirm(request, password=form.cleaned_data["password"])
            enrolment = second_factor_enrol(user_id=request.user.id, otp=form.cleaned_data["otp"] or None)
        except DomainError as error:
            add_domain_error(form, error)
        else:
            return _render(request, enrolment=enrolment)
    refused_form_keep(request, key=START_FORM, form=form)
    return redirect("web:security")


@never_cache
@login_required
@require_POST
def second_factor_confirm_view(request):
    """Turn the second factor on with a code from the new authenticator; show the recovery codes once (in an
    answer no cache keeps: ``Cache-Control: no-store``). Every other session of the user is logged out; this one
    stays (:mod:`apps.accounts.session_second_factor`)."""
    form = OtpForm(request.POST)
    if form.is_valid():
        try:
            codes = second_factor_confirm(user_id=request.user.id, otp=form.cleaned_data["otp"])
        except DomainError as error:
            add_domain_error(form, error)
        else:
            session_second_factor_keep(request, user_id=request.user.id)
            messages.success(
                request,
                "Second factor on: withdrawals and changes to it now need a code. Your other sessions are logged out.",
            )
            return _render(request, recovery_codes=codes)  # shown once, in this answer only: never kept
    refused_form_keep(request, key=CONFIRM_FORM, form=form)
    return redirect("web:security")


@login_required
@require_POST
def second_factor_remove_view(request):
    """Turn the second factor off with a current code (or a recovery code); every other session of the user is
    logged out, this one stays."""
    form = OtpForm(request.POST)
    if form.is_valid():
        try:
            second_factor_remove(user_id=request.user.id, otp=form.cleaned_data["otp"])
        except DomainError as error:
            add_domain_error(form, error)
        else:
            session_second_factor_keep(request, user_id=request.user.id)
            messages.success(
                request,
                "Second factor off: your other sessions are logged out. You cannot withdraw until you set one up "
                "again.",
            )
            return redirect("web:security")
    refused_form_keep(request, key=REMOVE_FORM, form=form)
    return redirect("web:security")
