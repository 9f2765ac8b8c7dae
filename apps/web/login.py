"""The traders' web log-in in two steps, as exchanges do: the password, then, for a user with a second factor,
a code from the authenticator (or a recovery code), checked by :mod:`apps.accounts.second_factor` like every
other path that needs one. The session is logged in only after both, and is then otp-verified
(``django_otp.login``: ``request.user.is_verified()``)."""

import time

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth import login as auth_login
from django.contrib.auth import logout as auth_logout
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.shortcuts import redirect, render
from django_otp import login as otp_login

from apps.accounts.errors import SecondFactorLocked
from apps.accounts.second_factor import second_factor_refusal, second_factor_verified_device, user_has_second_factor
from apps.accounts.session_idle import session_idle_ended_pop, session_idle_message
from apps.api.throttles import LoginRateThrottle
from apps.core.single_valued import SingleValuedForm

from .forms import OtpForm
from .throttled import ThrottledPostMixin

PENDING_LOGIN = "pending_login"
# How long the password step stays good for the second step, in seconds.
PENDING_LOGIN_SECONDS = 300


class LoginForm(SingleValuedForm, AuthenticationForm):
    """Django's log-in form, refusing a field sent twice (break-it review: ``username=x&username=alice`` logged in
    as alice)."""


class LoginView(ThrottledPostMixin, auth_views.LoginView):
    """``/accounts/login/``: username and password (django-axes counts failures per username and address); a user
    with a second factor is sent to the second step instead of being logged in. The form's POSTs are limited per
    client IP as the API's log-ins are (``API_RATE_LOGIN``; 429 past it), so one address cannot try a password
    on username after username."""

    throttle = LoginRateThrottle
    authentication_form = LoginForm
    throttled_message = "Too many log-ins from your network: try again in a minute."

    def get(self, request, *args, **kwargs):
        """The form; once after a session was logged out for being idle (:mod:`apps.accounts.session_idle`), it says
        so."""
        if session_idle_ended_pop(request):
            messages.info(request, session_idle_message())
        return super().get(request, *args, **kwargs)

    def form_valid(self, form):
        user = form.get_user()
        if self.request.user.is_authenticated and self.request.user.pk != user.pk:
            # Another user's session in this browser ends as a log-out ends it (their stream keys too: break-it
            # review); Django's login() only empties the session.
            auth_logout(self.request)
        if not user_has_second_factor(user_id=user.id):
            return super().form_valid(form)
        self.request.session[PENDING_LOGIN] = {
            "user_id": user.id,
            "backend": user.backend,
            "at": int(time.time()),
            "next": self.get_success_url(),
        }
        return redirect("login-second-factor")


def _pending_user(request):
    pending = request.session.get(PENDING_LOGIN)
    if not pending or time.time() - pending["at"] > PENDING_LOGIN_SECONDS:
        return None, None
    user = get_user_model().objects.filter(pk=pending["user_id"], is_active=True).first()
    return user, pending


def login_second_factor(request):
    """``/accounts/login/second-factor/``: the code after the password. Without a password step of the last
    five minutes in this session it goes back to the log-in; a missing, wrong or already used code is a 400
    with the reason next to the field; after wrong codes django-otp's throttle refuses every code for a while
    (a 429 saying how long; each wrong code is audited)."""
    user, pending = _pending_user(request)
    if user is None:
        request.session.pop(PENDING_LOGIN, None)
        messages.error(request, "Log in again: enter your username and password first.")
        return redirect("login")
    form = OtpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        code = form.cleaned_data["otp"]
        try:
            device = second_factor_verified_device(user_id=user.id, code=code)
        except SecondFactorLocked as locked:
            form.add_error("otp", locked.message)
            status = locked.status
        else:
            if device is not None:
                del request.session[PENDING_LOGIN]
                auth_login(request, user, backend=pending["backend"])
                otp_login(request, device)
                return redirect(pending["next"])
            form.add_error("otp", second_factor_refusal(user_id=user.id, code=code).message)
            status = 400
    else:
        status = 400 if request.method == "POST" else 200
    return render(request, "registration/login_second_factor.html", {"form": form}, status=status)
