"""The traders' security page: turn the second factor (an authenticator app) on, replace it, turn it off.

Enrolment shows the secret as a QR code rendered here as SVG (the ``qrcode`` package; no
JavaScript, nothing sent to a third party) and as base32 text; the recovery codes are shown
once, in the response that turns the second factor on.
"""

import qrcode
import qrcode.image.svg
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST

from apps.accounts.enrolment import (
    second_factor_confirm,
    second_factor_enrol,
    second_factor_pending,
    second_factor_remove,
)
from apps.accounts.second_factor import user_has_second_factor
from apps.core.errors import DomainError

from .forms import OtpForm, add_domain_error
from .refused import refused_form_keep, refused_form_pop

# The page's three code forms; a refused one is kept for the next GET (post/redirect/get: a reload sends nothing).
START_FORM, CONFIRM_FORM, REMOVE_FORM = "security-start", "security-confirm", "security-remove"


def qr_code_svg(data: str) -> str:
    """``data`` as an inline SVG QR code (paths only: no script, no external reference)."""
    image = qrcode.make(data, image_factory=qrcode.image.svg.SvgPathImage, box_size=8)
    return image.to_string(encoding="unicode")


def _render(request, *, form=None, replace_form=None, remove_form=None, recovery_codes=None):
    pending = second_factor_pending(user_id=request.user.id)
    context = {
        "enabled": user_has_second_factor(user_id=request.user.id),
        "pending": pending,
        "qr_svg": mark_safe(qr_code_svg(pending.otpauth_url)) if pending else None,  # noqa: S308 (made here)
        "form": form or OtpForm(),
        "replace_form": replace_form or OtpForm(),
        "remove_form": remove_form or OtpForm(),
        "recovery_codes": recovery_codes,
    }
    return render(request, "web/security.html", context)


@login_required
def security(request):
    """The second factor's state, and the set-up (QR code, secret, confirmation) while one is pending; a form
    refused on the last POST is shown again once, with its errors."""
    return _render(
        request,
        form=refused_form_pop(request, key=CONFIRM_FORM, form_class=OtpForm),
        replace_form=refused_form_pop(request, key=START_FORM, form_class=OtpForm),
        remove_form=refused_form_pop(request, key=REMOVE_FORM, form_class=OtpForm),
    )


@login_required
@require_POST
def second_factor_start(request):
    """Begin enrolling an authenticator; when one is on already, a current code from it is required."""
    form = OtpForm(request.POST)
    try:
        second_factor_enrol(user_id=request.user.id, otp=request.POST.get("otp"))
    except DomainError as error:
        form.is_valid()
        add_domain_error(form, error)
        refused_form_keep(request, key=START_FORM, form=form)
    return redirect("web:security")


@login_required
@require_POST
def second_factor_confirm_view(request):
    """Turn the second factor on with a code from the new authenticator; show the recovery codes once."""
    form = OtpForm(request.POST)
    if form.is_valid():
        try:
            codes = second_factor_confirm(user_id=request.user.id, otp=form.cleaned_data["otp"])
        except DomainError as error:
            add_domain_error(form, error)
        else:
            messages.success(request, "Second factor on: withdrawals and changes to it now need a code.")
            return _render(request, recovery_codes=codes)  # shown once, in this answer only: never kept
    refused_form_keep(request, key=CONFIRM_FORM, form=form)
    return redirect("web:security")


@login_required
@require_POST
def second_factor_remove_view(request):
    """Turn the second factor off with a current code (or a recovery code)."""
    form = OtpForm(request.POST)
    if form.is_valid():
        try:
            second_factor_remove(user_id=request.user.id, otp=form.cleaned_data["otp"])
        except DomainError as error:
            add_domain_error(form, error)
        else:
            messages.success(request, "Second factor off. You cannot withdraw until you set one up again.")
            return redirect("web:security")
    refused_form_keep(request, key=REMOVE_FORM, form=form)
    return redirect("web:security")
