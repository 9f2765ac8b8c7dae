"""Second factors in tests: enrol through the real services, or give a user a confirmed authenticator directly,
and compute codes as an authenticator app would (RFC 6238 with the device's own key, step and drift)."""

import time

from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.models import Session
from django_otp.oath import hotp, totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.accounts.enrolment import second_factor_confirm, second_factor_enrol
from apps.accounts.session_second_factor import SECOND_FACTOR_SESSION_KEY, second_factor_fingerprints

STEP_MARGIN_SECONDS = 2.0
"""A code is not computed this close to the end of a time step: checked just after the step changed, the earliest
step of the window (``now - tolerance``) would have left it, and the code be refused (a flaky test)."""


def totp_code(device: TOTPDevice) -> str:
    """A code the device accepts now, and still a moment from now: the earliest step in its tolerance window it has
    not used yet, computed at least ``STEP_MARGIN_SECONDS`` before the time step changes (else after it changed)."""
    device.refresh_from_db()
    left = device.step - (time.time() - device.t0) % device.step
    if left < STEP_MARGIN_SECONDS:
        time.sleep(left)
    now = int((time.time() - device.t0) // device.step) + device.drift
    step = max(device.last_t + 1, now - device.tolerance)
    assert step <= now + device.tolerance, "every code of this window was used"
    return f"{hotp(device.bin_key, step, digits=device.digits):0{device.digits}d}"


def user_code(user) -> str:
    """A current code from the user's confirmed authenticator."""
    return totp_code(TOTPDevice.objects.get(user=user, confirmed=True))


def enrol(user) -> list[str]:
    """Turn the user's second factor on through the services; return the recovery codes."""
    second_factor_enrol(user_id=user.id)
    return second_factor_confirm(user_id=user.id, otp=totp_code(TOTPDevice.objects.get(user=user, confirmed=False)))


def code_now(device: TOTPDevice, *, steps_ahead: int = 0) -> str:
    """The device's code for the current time step (or one ``steps_ahead``), as the user's authenticator shows it."""
    return f"{totp(device.bin_key, step=device.step, t0=device.t0, digits=device.digits, drift=steps_ahead):06d}"


def enrol_device(user) -> TOTPDevice:
    """Give ``user`` a confirmed TOTP authenticator directly (no recovery codes). The test's own authenticator, not
    an enrolment: the user's sessions logged in already stay logged in (:func:`sessions_keep`)."""
    device = TOTPDevice.objects.create(user=user, name="authenticator", confirmed=True)
    sessions_keep(user)
    return device


def sessions_keep(user) -> None:
    """Bind every stored session of ``user`` to their second factor of now, as the session that changes it is
    (:func:`apps.accounts.session_second_factor.session_second_factor_keep`): a test client logged in before the
    test gave the user an authenticator goes on. Scans the session table: for tests only."""
    fingerprint = second_factor_fingerprints(user_id=user.pk)[0]
    for stored in Session.objects.all():
        data = stored.get_decoded()
        if data.get(SESSION_KEY) == str(user.pk):
            Session.objects.save(
                stored.session_key, {**data, SECOND_FACTOR_SESSION_KEY: fingerprint}, stored.expire_date
            )


def fresh_code(user) -> str:
    """A valid, never used code of ``user``'s second factor: from a new authenticator of theirs, since a code
    is accepted once (django-otp refuses a replay in the same time step)."""
    return code_now(enrol_device(user))
