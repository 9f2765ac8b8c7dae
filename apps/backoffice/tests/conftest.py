import pytest
from django.contrib.auth.models import Group

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
