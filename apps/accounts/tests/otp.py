"""Second factors in tests: a confirmed TOTP authenticator and its code now (django-otp's own TOTP)."""

from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice


def code_now(device: TOTPDevice, *, steps_ahead: int = 0) -> str:
    """The device's code for the current time step (or one ``steps_ahead``), as the user's authenticator shows it."""
    return f"{totp(device.bin_key, step=device.step, t0=device.t0, digits=device.digits, drift=steps_ahead):06d}"


def enrol(user) -> TOTPDevice:
    """Give ``user`` a confirmed TOTP authenticator."""
    return TOTPDevice.objects.create(user=user, name="authenticator", confirmed=True)


def fresh_code(user) -> str:
    """A valid, never used code of ``user``'s second factor: from a new authenticator of theirs, since a code
    is accepted once (django-otp refuses a replay in the same time step)."""
    return code_now(enrol(user))
