"""Announces every change of a user's confirmed authenticators (:data:`apps.accounts.events.second_factor_changed`).

Sent from django-otp's TOTP device model signals, not by each path that changes them (the trader's security page,
the API, the back office's approved reset, a staff user's enrolment, paths to come), so none can forget it: a device
saved confirmed that was not (or with another key), created confirmed, or deleted while confirmed. Saves that change
neither (django-otp's own, recording a verified code or a throttle) are not announced. A set-up in progress (an
unconfirmed device) is not a second factor.
"""

from django.db.models.signals import post_delete, post_save, pre_save
from django_otp.plugins.otp_totp.models import TOTPDevice

from .events import second_factor_changed

_CHANGED = "_second_factor_changed"


def _confirmed_key(confirmed: bool, key: str) -> str | None:
    """What a device adds to the user's second factor: its key once confirmed, else nothing."""
    return key if confirmed else None


def _device_before_save(sender, instance: TOTPDevice, raw: bool = False, update_fields=None, **kwargs) -> None:
    """Note on ``instance`` whether this save changes what it adds to the second factor (one query for a stored
    device whose save may touch ``confirmed`` or ``key``)."""
    if raw or (update_fields is not None and not {"confirmed", "key"} & set(update_fields)):
        return
    stored = TOTPDevice.objects.filter(pk=instance.pk).values_list("confirmed", "key").first() if instance.pk else None
    before = _confirmed_key(*stored) if stored else None
    setattr(instance, _CHANGED, before != _confirmed_key(instance.confirmed, instance.key))


def _device_saved(sender, instance: TOTPDevice, raw: bool = False, **kwargs) -> None:
    if getattr(instance, _CHANGED, False):
        setattr(instance, _CHANGED, False)
        second_factor_changed.send(sender=TOTPDevice, user_id=instance.user_id)


def _device_deleted(sender, instance: TOTPDevice, **kwargs) -> None:
    if instance.confirmed:
        second_factor_changed.send(sender=TOTPDevice, user_id=instance.user_id)


def authenticators_watch() -> None:
    """Connect the receivers (``AccountsConfig.ready``)."""
    pre_save.connect(_device_before_save, sender=TOTPDevice, dispatch_uid="accounts.device_before_save")
    post_save.connect(_device_saved, sender=TOTPDevice, dispatch_uid="accounts.device_saved")
    post_delete.connect(_device_deleted, sender=TOTPDevice, dispatch_uid="accounts.device_deleted")
