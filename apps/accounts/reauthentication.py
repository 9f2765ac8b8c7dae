"""Proof that the account's holder, not only a browser session of theirs, makes a security change.

Turning a second factor on, changing the e-mail address and creating an API key hand the account
to whoever does them: from a stolen session cookie alone, an attacker who could do them would
lock the owner out for good (their own authenticator, their own address). So each needs a current
code when the second factor is on (the services ask for it), and the account's password, given
again, when it is off (OWASP Authentication Cheat Sheet, "Require re-authentication for sensitive
features"). Wrong passwords count as failed log-ins (django-axes): after ``AXES_FAILURE_LIMIT`` of
them the username is locked out from that address, here and on the log-in page alike.
"""

from django.contrib.auth import authenticate

from .errors import InvalidPassword
from .second_factor import user_has_second_factor


def password_is_right(request, *, password: str) -> bool:
    """Whether ``password`` is the signed-in user's, checked by ``authenticate`` as a log-in is: a wrong one counts as
    a failed log-in (django-axes), and every one is refused while the username is locked out from this address."""
    return authenticate(request, username=request.user.get_username(), password=password) is not None


def password_confirm(request, *, password: str | None) -> None:
    """Check ``password`` against the signed-in user of ``request`` (a Django ``HttpRequest``) when they have no
    second factor; with one on, return at once (the change's own code is the proof).

    Raises :class:`InvalidPassword` (field ``password``) when it is missing or wrong. Once django-axes locked the
    username out from this address, every password is refused, and its middleware answers the request with the
    log-in page's lockout (429, :mod:`apps.accounts.lockout`).
    """
    user = request.user
    if user_has_second_factor(user_id=user.pk):
        return
    if not password:
        raise InvalidPassword()
    if not password_is_right(request, password=password):
        raise InvalidPassword("That is not your password.")
