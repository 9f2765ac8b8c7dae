"""A second factor (TOTP, django-otp) for approvers in the back office.

Staff who may approve withdrawals or adjustments must confirm a time-based one-time
password once per session before any admin page opens; on their first visit they
enrol an authenticator app. Other staff sign in with their password only.
"""

from urllib.parse import quote

from django import forms
from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.shortcuts import redirect, render
from django.urls import Resolver404, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django_otp import login as otp_login
from django_otp.plugins.otp_totp.models import TOTPDevice

APPROVER_PERMISSIONS = ("wallets.approve_withdrawal", "backoffice.approve_adjustment")


def needs_second_factor(user) -> bool:
    """Whether ``user`` may approve money movements (and so must confirm a one-time password)."""
    return user.is_authenticated and user.is_staff and any(user.has_perm(p) for p in APPROVER_PERMISSIONS)


class SecondFactorMiddleware:
    """Send approvers without a confirmed one-time password this session to the verification page.

    Covers every admin URL except log-out, log-in and the verification page itself. The page is
    judged by ``request.path_info`` (the path below any ``SCRIPT_NAME`` / ``FORCE_SCRIPT_NAME``
    prefix) and by the view it resolves to: a page is exempt only when it resolves to one of the
    exempt views, so anything in doubt asks for the second factor (fail closed). Must come after
    ``django_otp.middleware.OTPMiddleware``.
    """

    EXEMPT_VIEWS = ("second-factor", "admin:logout", "admin:login")

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


class TokenForm(forms.Form):
    token = forms.CharField(
        max_length=8,
        label="One-time password",
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "numeric", "autofocus": True}),
    )


@staff_member_required
def second_factor(request):
    """Confirm a TOTP token; on the first visit, enrol a new authenticator (shown once, until confirmed)."""
    device = TOTPDevice.objects.filter(user=request.user, confirmed=True).first()
    enrolling = device is None
    if enrolling:
        device = TOTPDevice.objects.filter(user=request.user, confirmed=False).first() or TOTPDevice.objects.create(
            user=request.user, name="authenticator", confirmed=False
        )
    form = TokenForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if device.verify_token(form.cleaned_data["token"].strip()):
            if enrolling:
                device.confirmed = True
                device.save(update_fields=["confirmed"])
            otp_login(request, device)
            target = request.GET.get("next", "")
            if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
                target = reverse("admin:index")
            return redirect(target)
        form.add_error("token", "That code is not valid. Check your authenticator's clock and try again.")
    context = {
        "form": form,
        "enrolling": enrolling,
        "config_url": device.config_url if enrolling else None,
        "secret": device.key if enrolling else None,
    }
    return render(request, "admin/backoffice/second_factor.html", context)
