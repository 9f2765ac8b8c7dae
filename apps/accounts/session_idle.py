"""A browser session ends after ``SESSION_IDLE_SECONDS`` without use (30 minutes by default; 0 turns it off), besides
its absolute end ``SESSION_COOKIE_AGE`` after its log-in (:mod:`apps.accounts.sessions`), as exchanges' web sessions
do: a computer left logged in is not left open for the rest of the day.

The session stores the moment of its last use (``last_activity``: whole seconds since the epoch, UTC), set at the
log-in. Each request of a logged-in session reads it (:class:`SessionIdleMiddleware`): older than
``SESSION_IDLE_SECONDS``, the session is logged out (Django's ``logout``: the ``user_logged_out`` receivers run, the
stream keys of browser sessions end) and the request goes on as anonymous, so a page behind the log-in sends it to the
log-in page, which says why (:func:`session_idle_ended_pop`). Otherwise the moment is moved on, but only when it is at
least :data:`REFRESH_SECONDS` old (a quarter of ``SESSION_IDLE_SECONDS`` when that is shorter): the session is
written at most once a minute, not on every request (see ``SESSION_COOKIE_AGE`` in the settings), so a session ends
between ``SESSION_IDLE_SECONDS`` less a minute and ``SESSION_IDLE_SECONDS`` after its last request.

What a page asks by itself, on a timer or a stream's event (the wallet's balances every few seconds, the market
page's own tables and stream key), sends the header ``X-Background-Request``: such a request is checked but does not
count as use, or a page left open would keep its session alive for ever. A logged-in session with no moment (logged in
before this check existed) is logged out.
"""

import time

from django.conf import settings
from django.contrib.auth import SESSION_KEY, logout

LAST_ACTIVITY_SESSION_KEY = "last_activity"
IDLE_ENDED_SESSION_KEY = "session_ended_idle"
REFRESH_SECONDS = 60
BACKGROUND_HEADER = "X-Background-Request"


def _now() -> int:
    return int(time.time())


def _refresh_seconds(idle: int) -> int:
    """How old the last use must be before a request notes a new one: :data:`REFRESH_SECONDS`, or a quarter of
    ``idle`` (seconds) when that is shorter."""
    return min(REFRESH_SECONDS, idle // 4)


def session_activity_start(sender, request, user, **kwargs) -> None:
    """``user_logged_in`` receiver: the session's last use is its log-in."""
    session = getattr(request, "session", None)
    if session is not None:
        session[LAST_ACTIVITY_SESSION_KEY] = _now()


def session_idle_ended_pop(request) -> bool:
    """Whether ``request``'s session was just logged out for being idle (told once: the flag is removed)."""
    return bool(request.session.pop(IDLE_ENDED_SESSION_KEY, False))


def session_idle_message() -> str:
    """What the log-in page says to a session logged out for being idle."""
    minutes = max(1, round(settings.SESSION_IDLE_SECONDS / 60))
    return f"You were logged out after {minutes} minute{'s' if minutes != 1 else ''} without activity: log in again."


class SessionIdleMiddleware:
    """Log out a logged-in session unused for longer than ``SESSION_IDLE_SECONDS``, else note its use (at most every
    :data:`REFRESH_SECONDS` or a quarter of the timeout; never for a request with ``X-Background-Request``). Reads
    the session only, no query but the log-out's. Goes right after ``AuthenticationMiddleware``, before
    ``django_otp``'s ``OTPMiddleware`` (which then sees the anonymous user)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        idle = settings.SESSION_IDLE_SECONDS
        session = request.session
        if idle > 0 and SESSION_KEY in session:
            now, last = _now(), session.get(LAST_ACTIVITY_SESSION_KEY)
            if not isinstance(last, int) or now - last > idle:
                logout(request)
                request.session[IDLE_ENDED_SESSION_KEY] = True
            elif now - last >= _refresh_seconds(idle) and BACKGROUND_HEADER not in request.headers:
                session[LAST_ACTIVITY_SESSION_KEY] = now
        return self.get_response(request)
