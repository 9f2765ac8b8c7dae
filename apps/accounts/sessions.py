"""A browser session's end, fixed at its log-in.

Django computes a session's expiry as "``SESSION_COOKIE_AGE`` from its last save", so every request that writes
to the session (a refused form kept for the next page, say) moved the end on, and a stolen session could be kept
alive for ever (review). Setting the expiry as a moment, at the log-in, makes it absolute: Django stores that
moment in the session, and later saves keep it. A session unused for ``SESSION_IDLE_SECONDS`` ends earlier
(:mod:`apps.accounts.session_idle`).
"""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone


def session_end_fix(sender, request, user, **kwargs) -> None:
    """``user_logged_in`` receiver: the session ends ``SESSION_COOKIE_AGE`` seconds after this log-in."""
    session = getattr(request, "session", None)
    if session is not None:
        session.set_expiry(timezone.now() + timedelta(seconds=settings.SESSION_COOKIE_AGE))
