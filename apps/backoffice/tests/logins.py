"""Logging a test client in to the back office."""

from django.test import Client
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.plugins.otp_totp.models import TOTPDevice


def login_with_second_factor(client: Client, user) -> Client:
    """Log ``client`` in as ``user`` with a confirmed second factor (TOTP) this session."""
    client.force_login(user)
    device = TOTPDevice.objects.create(user=user, name="test", confirmed=True)
    session = client.session
    session[DEVICE_ID_SESSION_KEY] = device.persistent_id
    session.save()
    return client
