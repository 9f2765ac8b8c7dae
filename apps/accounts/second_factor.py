"""Traders' second factor (TOTP through django-otp): who has one, and checking a code.

Enrolment (a QR code, the base32 secret, recovery codes) is in :mod:`apps.accounts.enrolment`;
every path that needs a second factor (withdrawals, the address book, API keys with the
``withdraw`` scope, the token endpoint) asks these two functions, so the rule is decided in
one place. A recovery code (django-otp's static device, made at enrolment) passes
:func:`second_factor_verify` once in place of an authenticator's code.
"""

import time

from django_otp.models import Device
from django_otp.oath import TOTP
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from .errors import InvalidOtp, SecondFactorRequired

CODE_ALREADY_USED = "This code was already used. Wait for the next code from your authenticator app and enter that one."


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
    return second_factor_verified_device(user_id=user_id, code=code) is not None


def second_factor_verified_device(*, user_id: int, code: str | None) -> Device | None:
    """The user's django-otp device that accepts ``code`` now (the authenticator, or the recovery codes' device),
    or None; the same rules as :func:`second_factor_verify`. The web log-in marks the session verified by it
    (``django_otp.login``)."""
    code = (code or "").strip()
    if not code or len(code) > 32 or not user_has_second_factor(user_id=user_id):
        return None
    for device in TOTPDevice.objects.filter(user_id=user_id, confirmed=True):
        if device.verify_token(code):
            return device
    deleted, _ = StaticToken.objects.filter(
        device__user_id=user_id, device__confirmed=True, token=code.lower()
    ).delete()
    if not deleted:
        return None
    return StaticDevice.objects.filter(user_id=user_id, confirmed=True).order_by("pk").first()


def second_factor_code_was_used(*, user_id: int, code: str | None) -> bool:
    """Whether ``code`` is one of the user's authenticator's codes of now (within its tolerance) that was already
    accepted once: django-otp refuses it (``last_t``), and the user should wait for the next code.

    Only reads: call it after :func:`second_factor_verify` refused ``code``, to say why.
    """
    code = (code or "").strip()
    if not code.isdigit() or len(code) > 10:
        return False
    for device in TOTPDevice.objects.filter(user_id=user_id, confirmed=True):
        authenticator = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
        authenticator.time = time.time()
        if authenticator.verify(int(code), device.tolerance) and authenticator.t() <= device.last_t:
            return True
    return False


def second_factor_refusal(*, user_id: int, code: str | None) -> InvalidOtp:
    """The :class:`InvalidOtp` to raise for a refused ``code``: "already used" when it was a right code used
    before, the general message otherwise."""
    if second_factor_code_was_used(user_id=user_id, code=code):
        return InvalidOtp(CODE_ALREADY_USED)
    return InvalidOtp()


def second_factor_require(*, user_id: int, code: str | None) -> None:
    """Refuse unless the user has a second factor and ``code`` is valid for it now (a recovery code counts).

    Raises :class:`SecondFactorRequired` without a confirmed authenticator, :class:`InvalidOtp`
    for a missing or wrong code (saying so when the code was right but already used). For withdrawals and
    changes of the second factor itself.
    """
    if not user_has_second_factor(user_id=user_id):
        raise SecondFactorRequired()
    if not second_factor_verify(user_id=user_id, code=code):
        raise second_factor_refusal(user_id=user_id, code=code)


def second_factor_check_if_enrolled(*, user_id: int, code: str | None) -> None:
    """Refuse a missing, wrong or already used ``code`` (:class:`InvalidOtp`) when the user has a second factor;
    else pass."""
    if user_has_second_factor(user_id=user_id) and not second_factor_verify(user_id=user_id, code=code):
        raise second_factor_refusal(user_id=user_id, code=code)
