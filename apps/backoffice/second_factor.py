"""A second factor (TOTP, django-otp) for approvers in the back office.

Staff who may approve withdrawals, adjustments, fee changes, second-factor resets or lifting a withdrawals block (and,
with ``STAFF_SECOND_FACTOR_REQUIRED``, every staff user) must confirm a time-based one-time
password once per session before any admin page opens; on their first visit they
enrol an authenticator app.
"""

import base64
from urllib.parse import quote

import qrcode
from django import forms
from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.shortcuts import redirect, render
from django.urls import Resolver404, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe
from django.views.decorators.cache import never_cache
from django_otp import login as otp_login
from django_otp.plugins.otp_totp.models import TOTPDevice
from qrcode.image.svg import SvgPathImage

from apps.accounts.errors import SecondFactorLocked
from apps.accounts.second_factor import second_factor_device_verify
from apps.accounts.session_second_factor import session_second_factor_keep
from apps.core.single_valued import SingleValuedForm

from .groups import GROUP_PERMISSIONS

APPROVER_PERMISSIONS = tuple(GROUP_PERMISSIONS["approvers"])
"""What the approvers' group may do beyond the operators' (:mod:`apps.backoffice.groups`): one list, so a new approval
gets its second factor with its group (break-it review: approving market changes was left out, and a user holding
only that permission was never asked to enrol, so could never approve)."""


def needs_second_factor(user) -> bool:
    """Whether staff ``user`` must confirm a one-time password: every staff user when
    ``settings.STAFF_SECOND_FACTOR_REQUIRED`` (production), otherwise those who may approve."""
    if not (user.is_authenticated and user.is_staff):
        return False
    return settings.STAFF_SECOND_FACTOR_REQUIRED or any(user.has_perm(p) for p in APPROVER_PERMISSIONS)


class SecondFactorMiddleware:
    """Send approvers without a confirmed one-time password this session to the verification page.

    Covers every admin URL except log-out, log-in and the verification page itself. The page is
    judged by ``request.path_info`` (the path below any ``SCRIPT_NAME`` / ``FORCE_SCRIPT_NAME``
    prefix) and by the view it resolves to: a page is exempt only when it resolves to one of the
    exempt views, so anything in doubt asks for the second factor (fail closed). Must come after
    ``django_otp.middleware.OTPMiddleware``.
    """

    EXEMPT_VIEWS = ("second-factor", "admin:logout", "admin-login")

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if needs_second_factor(request.user) and not request.user.is_verified() and _is_guarded(request.path_info):
            return redirect(f"{reverse('second-factor')}?next={quote(request.get_full_path(), safe='/')}")
        return self.get_response(request)


def _is_guarded(path_info: str) -> bool:
    """Whether ``path_info`` (a path below the script prefix) is an admin page that needs the second factor."""
    try:
        match = resolve(path_info)
    except Resolver404:
        match = None
    in_admin = path_info.startswith(f"/{settings.ADMIN_URL}") or (match is not None and "admin" in match.namespaces)
    return in_admin and (match is None or match.view_name not in SecondFactorMiddleware.EXEMPT_VIEWS)


def admin_login(request):
    """``/admin/login/``: the traders' log-in (:mod:`apps.web.login`), back to ``next`` (the admin's index by default).

    Django's own admin log-in logged a session in with the password alone, which then opened every trader page and
    API of a user with a second factor without it (break-it review); one log-in, in two steps for such a user, for
    the whole site. Its throttle, lock-out and notice apply to staff too. A customer already logged in gets a 403
    (the log-in again would send them back here, round and round: break-it review); staff go on to ``next``."""
    target = request.GET.get("next") or reverse("admin:index")
    if request.user.is_authenticated and not request.user.is_staff:
        raise DjangoPermissionDenied
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("admin:index")
    if request.user.is_authenticated:
        return redirect(target)
    return redirect(f"{reverse('login')}?next={quote(target, safe='/')}")


def admin_password_change(request):
    """``/admin/password_change/``: the traders' password change (:mod:`apps.web.passwords`), whose current password
    counts as a log-in (throttled, locked out), and whose change is audited, e-mailed, pauses withdrawals and ends
    the stream keys of other sessions. Django's admin view did none of it (break-it review)."""
    return redirect("password-change")


def qr_code_svg(data: str) -> str:
    """``data`` (an ``otpauth://`` URL) as an inline SVG QR code (about 5 cm), drawn on the server by the ``qrcode``
    package: paths only, so nothing of ``data`` appears as markup and the page loads no script."""
    image = qrcode.make(data, image_factory=SvgPathImage, box_size=20, border=2)
    return mark_safe(image.to_string(encoding="unicode"))  # noqa: S308  (generated paths, no input text)


class TokenForm(SingleValuedForm, forms.Form):
    token = forms.CharField(
        max_length=8,
        label="One-time password",
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "numeric", "autofocus": True}),
    )


@never_cache
@staff_member_required
def second_factor(request):
    """Confirm a TOTP token; on the first visit, enrol a new authenticator (its secret shown until confirmed, the
    answers marked ``Cache-Control: no-store``, ``never_cache``, so no browser or proxy cache keeps it: break-it
    review)."""
    device = TOTPDevice.objects.filter(user=request.user, confirmed=True).first()
    enrolling = device is None
    if enrolling:
        device = TOTPDevice.objects.filter(user=request.user, confirmed=False).first() or TOTPDevice.objects.create(
            user=request.user, name="authenticator", confirmed=False
        )
    form = TokenForm(request.POST or None)
    status = 200
    if request.method == "POST" and form.is_valid():
        # Throttled and audited like the traders' checks (apps.accounts.second_factor).
        try:
            verified = second_factor_device_verify(
                user_id=request.user.id, device_id=device.pk, code=form.cleaned_data["token"]
            )
        except SecondFactorLocked as locked:
            # django-otp refuses every code, even a right one, for a while after wrong ones: say so.
            form.add_error("token", locked.message)
            status = locked.status
        else:
            if verified is not None:
                if enrolling:
                    verified.confirmed = True
                    verified.save(update_fields=["confirmed"])
                    # The staff user's other sessions end (a new second factor); this one goes on.
                    session_second_factor_keep(request, user_id=request.user.id)
                otp_login(request, verified)
                target = request.GET.get("next", "")
                if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
                    target = reverse("admin:index")
                return redirect(target)
            form.add_error(
                "token",
                "That code is not valid (or was already used). Wait for the next code of your authenticator, "
                "check its clock, and try again.",
            )
    context = {
        "form": form,
        "enrolling": enrolling,
        "config_url": device.config_url if enrolling else None,
        "secret": base64.b32encode(device.bin_key).decode() if enrolling else None,
        "qr_code": qr_code_svg(device.config_url) if enrolling else None,
    }
    return render(request, "admin/backoffice/second_factor.html", context, status=status)
