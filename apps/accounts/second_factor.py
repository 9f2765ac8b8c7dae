"""Traders' second factor (TOTP through django-otp): who has one, and checking a code.

Enrolment (a QR code, the base32 secret, recovery codes) is in :mod:`apps.accounts.enrolment`;
every path that needs a second factor (withdrawals, the address book, API keys with the
``withdraw`` scope, the token endpoint) asks these two functions, so the rule is decided in
one place. A recovery code (django-otp's static device, made at enrolment) passes
:func:`second_factor_verify` once in place of an authenticator's code.
"""

from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from .errors import InvalidOtp, SecondFactorRequired


def user_has_second_factor(*, user_id: int) -> bool:
    """Whether the user has confirmed a TOTP authenticator."""
    return TOTPDevice.objects.filter(user_id=user_id, confirmed=True).exists()


def second_factor_verify(*, user_id: int, code: str | None) -> bool:
    """Whether ``code`` (6 digits from the user's authenticator, or one of their recovery codes) is valid now.

    False for an empty code or a user with no confirmed authenticator. django-otp refuses a
    TOTP code already used (its ``last_t`` throttle), so a code cannot be replayed; a
    recovery code is deleted by the one statement that accepts it, so each one works once,
    even for two requests at the same time.
    """
    code = (code or "").strip()
    if not code or len(code) > 32 or not user_has_second_factor(user_id=user_id):
        return False
    if any(device.verify_token(code) for device in TOTPDevice.objects.filter(user_id=user_id, confirmed=True)):
        return True
    deleted, _ = StaticToken.objects.filter(
        device__user_id=user_id, device__confirmed=True, token=code.lower()
    ).delete()
    return deleted > 0


def second_factor_require(*, user_id: int, code: str | None) -> None:
    """Refuse unless the user has a second factor and ``code`` is valid for it now (a recovery code counts).

    Raises :class:`SecondFactorRequired` without a confirmed authenticator, :class:`InvalidOtp`
    for a missing or wrong code. For withdrawals and changes of the second factor itself.
    """
    if not user_has_second_factor(user_id=user_id):
        raise SecondFactorRequired()
    if not second_factor_verify(user_id=user_id, code=code):
        raise InvalidOtp()


def second_factor_check_if_enrolled(*, user_id: int, code: str | None) -> None:
    """Refuse a missing or wrong ``code`` (:class:`InvalidOtp`) when the user has a second factor; else pass."""
    if user_has_second_factor(user_id=user_id) and not second_factor_verify(user_id=user_id, code=code):
        raise InvalidOtp()
