"""Writes of a trader's second factor: enrol an authenticator (TOTP), confirm it, remove it.

Confirming an authenticator turns the second factor on and makes a fresh set of recovery
codes (django-otp's static device), shown once. Changing a second factor that is on
(enrolling another authenticator, removing it) needs a current code; enrolling the first one needs the
password again, which the callers check (:mod:`apps.accounts.reauthentication`). Each step is recorded
in the back office's audit log in the same transaction, with the trader as the actor, and turning the
second factor on or off is e-mailed to the trader. Replacing or removing a second factor pauses withdrawals
(:mod:`apps.accounts.holds`); setting up the first one does not.
"""

import base64
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.audit.services import audit_record

from .holds import withdrawals_hold
from .models import HoldReason
from .notifications import email_user_on_commit
from .second_factor import (
    InvalidOtp,
    second_factor_check_if_enrolled,
    second_factor_device_verify,
    second_factor_require,
    user_has_second_factor,
)

RECOVERY_CODE_COUNT = 10
PENDING_NAME = "authenticator (not confirmed)"


@dataclass(frozen=True)
class Enrolment:
    """A new authenticator waiting for its first code: ``secret`` is its key in base32 (RFC 4648, what
    authenticator apps take), ``otpauth_url`` the ``otpauth://totp/...`` URI a QR code carries."""

    secret: str
    otpauth_url: str


def _enrolment(device: TOTPDevice) -> Enrolment:
    return Enrolment(secret=base64.b32encode(device.bin_key).decode(), otpauth_url=device.config_url)


def _audit(user_id: int, action: str, *, before: bool, after: bool) -> None:
    audit_record(
        actor_id=user_id,
        action=action,
        object_type="second_factor",
        object_id=user_id,
        before={"enabled": before},
        after={"enabled": after},
    )


def second_factor_enrol(*, user_id: int, otp: str | None = None) -> Enrolment:
    """Start enrolling an authenticator: a new TOTP secret (30 s steps, 6 digits) replacing any earlier
    unconfirmed one. It counts only once :func:`second_factor_confirm` accepts a code from it.

    A user whose second factor is on must give a current ``otp`` (re-enrolling replaces the old
    authenticator when the new one is confirmed); raises :class:`InvalidOtp` otherwise. Codes are
    checked before the transaction (call this outside one), so a wrong code counts against
    django-otp's throttle.
    """
    second_factor_check_if_enrolled(user_id=user_id, code=otp)
    with transaction.atomic():
        TOTPDevice.objects.filter(user_id=user_id, confirmed=False).delete()
        device = TOTPDevice.objects.create(user_id=user_id, name=PENDING_NAME, confirmed=False)
        enabled = user_has_second_factor(user_id=user_id)
        _audit(user_id, "second_factor.enrol", before=enabled, after=enabled)
    return _enrolment(device)


def second_factor_pending(*, user_id: int) -> bool:
    """Whether an authenticator waits for its first code (:func:`second_factor_confirm`). Its secret is never read
    again: it is shown once, by the caller of :func:`second_factor_enrol`."""
    return TOTPDevice.objects.filter(user_id=user_id, confirmed=False).exists()


def second_factor_confirm(*, user_id: int, otp: str | None) -> list[str]:
    """Turn the second factor on with a code from the authenticator being enrolled; return the new recovery
    codes (10, each usable once; stored by django-otp, shown only now).

    Replaces any earlier authenticator and recovery codes. Raises :class:`InvalidOtp` when no
    enrolment is pending or the code is wrong (checked before the transaction, like
    :func:`second_factor_enrol`), :class:`~apps.accounts.errors.SecondFactorLocked` after wrong codes.
    """
    device = TOTPDevice.objects.filter(user_id=user_id, confirmed=False).order_by("-id").first()
    code = (otp or "").strip()
    if device is None:
        raise InvalidOtp("Start the set-up first: no authenticator is waiting for confirmation.")
    if second_factor_device_verify(user_id=user_id, device_id=device.pk, code=code) is None:
        raise InvalidOtp("That code is not valid. Check your authenticator app's clock and try again.")
    return _second_factor_turn_on(user_id=user_id, device_id=device.pk)


@transaction.atomic
def _second_factor_turn_on(*, user_id: int, device_id: int) -> list[str]:
    device = TOTPDevice.objects.select_for_update(of=("self",)).filter(pk=device_id, confirmed=False).first()
    if device is None:  # confirmed (or replaced) by a concurrent request
        raise InvalidOtp("This authenticator was confirmed or replaced meanwhile; start the set-up again.")
    before = user_has_second_factor(user_id=user_id)
    TOTPDevice.objects.filter(user_id=user_id).exclude(pk=device.pk).delete()
    StaticDevice.objects.filter(user_id=user_id).delete()
    device.name = "authenticator"
    device.confirmed = True
    device.save(update_fields=["name", "confirmed"])
    recovery = StaticDevice.objects.create(user_id=user_id, name="recovery codes", confirmed=True)
    codes = [StaticToken.random_token() for _ in range(RECOVERY_CODE_COUNT)]
    StaticToken.objects.bulk_create([StaticToken(device=recovery, token=code) for code in codes])
    _audit(user_id, "second_factor.confirm", before=before, after=True)
    held_until = (
        withdrawals_hold(user_id=user_id, reason=HoldReason.SECOND_FACTOR_REPLACED, actor_id=user_id)
        if before
        else None
    )
    email_user_on_commit(
        user_id=user_id, template="second_factor_on", context={"time": timezone.now(), "held_until": held_until}
    )
    return codes


def second_factor_remove(*, user_id: int, otp: str | None) -> None:
    """Turn the second factor off: delete the authenticator and the recovery codes.

    Needs a current code (or a recovery code), checked before the transaction: raises
    :class:`SecondFactorRequired` when it is off, :class:`InvalidOtp` for a wrong code.
    """
    second_factor_require(user_id=user_id, code=otp)
    with transaction.atomic():
        TOTPDevice.objects.filter(user_id=user_id).delete()
        StaticDevice.objects.filter(user_id=user_id).delete()
        _audit(user_id, "second_factor.remove", before=True, after=False)
        held_until = withdrawals_hold(user_id=user_id, reason=HoldReason.SECOND_FACTOR_REMOVED, actor_id=user_id)
        email_user_on_commit(
            user_id=user_id, template="second_factor_off", context={"time": timezone.now(), "held_until": held_until}
        )
