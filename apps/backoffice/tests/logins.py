"""Logging a test client in to the back office."""

from django.test import Client
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.plugins.otp_totp.models import TOTPDevice


def login_with_second_factor(client: Client, user) -> Client:
    """Log ``client`` in as ``user`` with a confirmed second factor (TOTP) this session."""
    device = TOTPDevice.objects.create(user=user, name="test", confirmed=True)
    client.force_login(user)  # after the authenticator: a session is bound to the second factor it logged in with
    session = client.session
    session[DEVICE_ID_SESSION_KEY] = device.persistent_id
    session.save()
    return client
