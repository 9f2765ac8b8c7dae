import pytest
from django.contrib.auth.models import Group
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.ledger.tests.factories import UserFactory


@pytest.fixture
def operator(db):
    """A staff user in the operators group."""
    user = UserFactory(username="olga", is_staff=True)
    user.groups.add(Group.objects.get(name="operators"))
    return user


@pytest.fixture
def approver(db):
    """A staff user in the operators and approvers groups."""
    user = UserFactory(username="arno", is_staff=True)
    user.groups.add(Group.objects.get(name="operators"), Group.objects.get(name="approvers"))
    return user


@pytest.fixture
def admin_login(client):
    """``admin_login(user)``: log ``client`` in as ``user`` with a confirmed second factor this session."""

    def login(user):
        client.force_login(user)
        device = TOTPDevice.objects.create(user=user, name="test", confirmed=True)
        session = client.session
        session[DEVICE_ID_SESSION_KEY] = device.persistent_id
        session.save()

    return login
