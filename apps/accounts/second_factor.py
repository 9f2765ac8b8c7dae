"""Traders' second factor (TOTP through django-otp): who has one, and checking a code.

Enrolment (a QR code, the base32 secret, recovery codes) is in :mod:`apps.accounts.enrolment`;
every path that needs a second factor (withdrawals, the address book, API keys with the
``withdraw`` scope, the token endpoint) asks these two functions, so the rule is decided in
one place; the web log-in, the enrolment's confirmation and the back office's approvers check a code
through :func:`second_factor_verified_device` / :func:`second_factor_device_verify`. A recovery code
(django-otp's static device, made at enrolment) passes :func:`second_factor_verify` once in place of an
authenticator's code.

Every check is throttled by django-otp (after a wrong code every code is refused for 1, 2, 4 ... seconds:
:class:`~apps.accounts.errors.SecondFactorLocked`; a right code used already is refused without counting) and
every refused code is audited
(``second_factor.failed``), both committed even when the request is refused (:func:`_devices_verify`).
"""

import time
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django_otp.models import Device
from django_otp.oath import TOTP
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.audit.services import audit_record

from .errors import InvalidOtp, SecondFactorLocked, SecondFactorRequired

CODE_ALREADY_USED = "This code was already used. Wait for the next code from your authenticator app and enter that one."


def user_has_second_factor(*, user_id: int) -> bool:
    """Whether the user has confirmed a TOTP authenticator."""
    return TOTPDevice.objects.filter(user_id=user_id, confirmed=True).exists()


def second_factor_verify(*, user_id: int, code: str | None) -> bool:
    """Whether ``code`` (6 digits from the user's authenticator, or one of their recovery codes) is valid now.

    False for an empty code or a user with no confirmed authenticator. django-otp refuses a
    TOTP code already used (its ``last_t`` throttle), so a code cannot be replayed; a
    recovery code is deleted when it is accepted, under a lock of its device, so each one works once,
    even for two requests at the same time. Raises :class:`SecondFactorLocked` after wrong codes
    (:func:`second_factor_verified_device`).
    """
    return second_factor_verified_device(user_id=user_id, code=code) is not None


def second_factor_verified_device(*, user_id: int, code: str | None) -> Device | None:
    """The user's django-otp device that accepts ``code`` now (the authenticator, or the recovery codes' device),
    or None; the same rules as :func:`second_factor_verify`. The web log-in marks the session verified by it
    (``django_otp.login``).

    Raises :class:`SecondFactorLocked` while django-otp's throttle holds the user's devices after wrong codes.
    Call it outside any transaction: see :func:`_devices_verify`.
    """
    if not user_has_second_factor(user_id=user_id):
        return None
    return _devices_verify(
        user_id=user_id,
        code=code,
        devices=[
            TOTPDevice.objects.filter(user_id=user_id, confirmed=True),
            StaticDevice.objects.filter(user_id=user_id, confirmed=True),
        ],
    )


def second_factor_device_verify(*, user_id: int, device_id: int, code: str | None) -> Device | None:
    """Check ``code`` against one TOTP device of the user (confirmed or being enrolled: the enrolment's and the
    back office's confirmation): the device when it accepts it, else None.

    Throttled and audited like every other check (:class:`SecondFactorLocked`, ``second_factor.failed``).
    """
    return _devices_verify(
        user_id=user_id, code=code, devices=[TOTPDevice.objects.filter(user_id=user_id, pk=device_id)]
    )


def _devices_verify(*, user_id: int, code: str | None, devices: list[QuerySet]) -> Device | None:
    """The first of ``devices`` (querysets of django-otp devices, in the order to try) that accepts ``code``.

    One durable transaction of its own, whatever the caller does next: it locks the devices (so two requests
    at the same time cannot both pass the throttle, nor use one recovery code twice), asks django-otp
    (``verify_is_allowed``, ``verify_token``: its exponential throttle, ``OTP_TOTP_THROTTLE_FACTOR`` and
    ``OTP_STATIC_THROTTLE_FACTOR``) and, for a refused code, writes the audit row ``second_factor.failed``;
    it commits before the refusal is raised, so a refused request still leaves both. An empty code (a field
    left out) is refused without counting. Raises :class:`SecondFactorLocked` while a device is throttled
    (the code is then not even tried) and ``RuntimeError`` when called inside a transaction.
    """
    code = (code or "").strip()
    locked_until = None
    with transaction.atomic(durable=True):
        found = [device for queryset in devices for device in queryset.select_for_update(of=("self",), no_key=True)]
        if not code or not found:
            return None
        locked_until = _locked_until(found)
        if locked_until is None and any(_code_was_used(device, code) for device in found):
            # A right code used already (a double click, a client's retry) is no guess: refused, not counted.
            _audit_failure(user_id=user_id, devices=found, locked_until=None, reason="already_used")
            return None
        accepted = None
        if locked_until is None:
            accepted = next((device for device in found if device.verify_token(_as_token(device, code))), None)
        if accepted is not None:
            for device in found:
                if device is not accepted and device.throttling_failure_count:
                    device.throttle_reset()
            return accepted
        _audit_failure(user_id=user_id, devices=found, locked_until=locked_until)
    if locked_until is not None:
        raise SecondFactorLocked(locked_until=locked_until)
    return None


def _as_token(device: Device, code: str) -> str:
    """Recovery codes are stored in lower case; an authenticator's code is digits."""
    return code.lower() if isinstance(device, StaticDevice) else code


def _locked_until(devices: list[Device]) -> datetime | None:
    """Until when django-otp refuses every code for these devices (the latest of them), or None."""
    until = None
    for device in devices:
        allowed, data = device.verify_is_allowed()
        if not allowed:
            at = (data or {}).get("locked_until") or timezone.now()
            until = at if until is None else max(until, at)
    return until


def _audit_failure(
    *, user_id: int, devices: list[Device], locked_until: datetime | None, reason: str = "wrong_code"
) -> None:
    audit_record(
        actor_id=user_id,
        action="second_factor.failed",
        object_type="auth.user",
        object_id=user_id,
        before={},
        after={
            "reason": "locked" if locked_until is not None else reason,
            "failures": max(device.throttling_failure_count for device in devices),
            "locked_until": locked_until.isoformat() if locked_until is not None else None,
        },
    )


def second_factor_code_was_used(*, user_id: int, code: str | None) -> bool:
    """Whether ``code`` is one of the user's authenticator's codes of now (within its tolerance) that was already
    accepted once: django-otp refuses it (``last_t``), and the user should wait for the next code.

    Only reads: call it after :func:`second_factor_verify` refused ``code``, to say why.
    """
    code = (code or "").strip()
    return any(_code_was_used(device, code) for device in TOTPDevice.objects.filter(user_id=user_id, confirmed=True))


def _code_was_used(device: Device, code: str) -> bool:
    """Whether ``code`` is a code of now (within its tolerance) of the authenticator ``device`` that it already
    accepted (``last_t``); ``False`` for a recovery code's device, and for anything but ASCII digits (``²`` is a
    digit to ``str.isdigit()`` that ``int()`` cannot read)."""
    if not isinstance(device, TOTPDevice) or not (code.isascii() and code.isdigit()) or len(code) > 10:
        return False
    authenticator = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    authenticator.time = time.time()
    return authenticator.verify(int(code), device.tolerance) and authenticator.t() <= device.last_t


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
