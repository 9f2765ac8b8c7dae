"""A browser session is bound to the second factor it logged in with: enrolling an authenticator, replacing it or
removing it (by the trader, through the API, by the back office's reset, or any path to come) ends every other
session of the user, as a password change does (Django's session auth hash); the session that made the change is
kept logged in (:func:`session_second_factor_keep`, as ``update_session_auth_hash`` does for a password).

The binding is a fingerprint of the user's confirmed authenticators (django-otp's TOTP devices: their ids and keys)
and of how many times they changed (:class:`~apps.accounts.models.SecondFactorEpoch`, counted from the announcements
of :mod:`apps.accounts.authenticators`), as an HMAC of ``SECRET_KEY``, stored in the session at its log-in and
compared on each request of a logged-in session (:class:`SessionSecondFactorMiddleware`), so no path that changes them
can forget to end the sessions: the state itself is checked, and the count catches a change undone before the other
session's next request (turned on, then off). An unconfirmed authenticator (a set-up in progress) and the
recovery codes (made and removed with the authenticator) do not count. A session with no fingerprint (logged in
before this check existed) is logged out.
"""

from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.contrib.auth.models import AnonymousUser
from django.db.models import F
from django.utils.crypto import constant_time_compare, salted_hmac
from django_otp.plugins.otp_totp.models import TOTPDevice

from .models import SecondFactorEpoch

SECOND_FACTOR_SESSION_KEY = "second_factor_hash"
_SALT = "apps.accounts.session_second_factor"


def second_factor_fingerprints(*, user_id: int) -> list[str]:
    """The fingerprint of the user's confirmed authenticators now and of how many times they changed
    (:class:`~apps.accounts.models.SecondFactorEpoch`), 64 hex characters, first with ``SECRET_KEY``, then with each
    of ``SECRET_KEY_FALLBACKS`` (so rotating the secret key ends no session). Two queries."""
    devices = TOTPDevice.objects.filter(user_id=user_id, confirmed=True).order_by("pk").values_list("pk", "key")
    epoch = SecondFactorEpoch.objects.filter(user_id=user_id).values_list("number", flat=True).first() or 0
    state = f"{epoch}|" + ";".join(f"{pk}:{key}" for pk, key in devices)
    return [
        salted_hmac(_SALT, state, secret=secret, algorithm="sha256").hexdigest()
        for secret in [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]
    ]


def session_second_factor_keep(request, *, user_id: int) -> None:
    """After a change of ``user_id``'s second factor made in this ``request``: keep its session logged in (every other
    session of the user is logged out at its next request). Nothing when the request's session is not the user's
    (an API key's request, a back-office operator's)."""
    if request.session.get(SESSION_KEY) == str(user_id):
        request.session[SECOND_FACTOR_SESSION_KEY] = second_factor_fingerprints(user_id=user_id)[0]


def second_factor_epoch_bump(sender, *, user_id: int, **kwargs) -> None:
    """:data:`~apps.accounts.events.second_factor_changed` receiver: count the change
    (:class:`~apps.accounts.models.SecondFactorEpoch`), in its transaction, so every session bound before it differs
    from now."""
    epoch, created = SecondFactorEpoch.objects.get_or_create(user_id=user_id, defaults={"number": 1})
    if not created:
        SecondFactorEpoch.objects.filter(pk=epoch.pk).update(number=F("number") + 1)


def session_second_factor_bind(sender, request, user, **kwargs) -> None:
    """``user_logged_in`` receiver: bind the new session to the user's second factor of now."""
    session = getattr(request, "session", None)
    if session is not None:
        session_second_factor_keep(request, user_id=user.pk)


def session_second_factor_matches(request) -> bool:
    """Whether the logged-in session of ``request`` was bound to its user's second factor as it is now (False for a
    session with no fingerprint)."""
    stored = request.session.get(SECOND_FACTOR_SESSION_KEY)
    if not stored:
        return False
    return any(constant_time_compare(stored, now) for now in second_factor_fingerprints(user_id=request.user.pk))


class SessionSecondFactorMiddleware:
    """Log out a session whose user's second factor changed since it was bound (at its log-in, or by
    :func:`session_second_factor_keep`): the session is emptied and the request goes on as anonymous, as Django does
    for a session whose password hash no longer matches (pages behind a log-in send it to the log-in page; htmx and
    API requests get what an expired session gets). Requests without a logged-in session (API keys, anonymous
    visitors) cost nothing; a logged-in one costs two queries.

    Goes right after ``AuthenticationMiddleware``, before ``django_otp``'s ``OTPMiddleware`` (which then sees the
    anonymous user)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.user.is_authenticated and not session_second_factor_matches(request):
            request.session.flush()
            request.user = AnonymousUser()
        return self.get_response(request)
