"""The owner's freeze of the account from the notice of a replaced e-mail address (apps/accounts/account_freeze.py)."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from apps.accounts.account_freeze import SALT, account_freeze, account_freeze_link, account_freeze_pending
from apps.accounts.email_address import email_address_confirm
from apps.accounts.models import AccountRestriction, ApiKey, EmailRequest
from apps.accounts.restrictions import account_withdrawals_block
from apps.accounts.services import api_key_create
from apps.accounts.tests.email_links import link_for
from apps.audit.models import AuditLogEntry
from apps.core.links import InvalidLink, signed_token_make
from apps.ledger.tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _freeze_token(user) -> str:
    """The token of the freeze link in the notice sent when ``user``'s address was replaced (by new@example.com)."""
    email_address_confirm(token=link_for(user, "new@example.com"))
    request = EmailRequest.objects.filter(user=user).latest("id")
    return account_freeze_link(request=request)["freeze_link"].rsplit("/", 2)[-2]


def test_the_freeze_disables_the_log_in_revokes_the_keys_and_stops_trading_and_withdrawals():
    user = UserFactory(email="old@example.com")
    api_key_create(user_id=user.id, name="bot", scopes=["read"])
    token = _freeze_token(user)

    assert account_freeze_pending(token=token).user == user
    account_freeze(token=token)

    assert not get_user_model().objects.get(pk=user.pk).is_active
    assert not ApiKey.objects.filter(user=user, revoked_at__isnull=True).exists()
    restriction = AccountRestriction.objects.get(user=user)
    assert restriction.trading_frozen and restriction.withdrawals_blocked and restriction.updated_by_id == user.id
    reason = "Frozen by the account's owner from the notice that its e-mail address was changed to new@example.com."
    assert restriction.trading_reason == restriction.withdrawals_reason == reason
    (audit,) = AuditLogEntry.objects.filter(action="account.owner_freeze")
    assert (audit.actor_id, audit.object_id) == (user.id, str(user.id))
    assert (audit.before["trading_frozen"], audit.after["trading_frozen"]) == (False, True)
    assert AuditLogEntry.objects.filter(action="api_key.revoked", after__reason="account_frozen").count() == 1


def test_a_second_use_changes_nothing_more_and_an_operators_block_keeps_its_reason():
    user = UserFactory(email="old@example.com")
    operator = UserFactory(is_staff=True)
    operator.groups.add(Group.objects.get(name="operators"))
    account_withdrawals_block(user_id=user.id, operator_id=operator.id, blocked=True, reason="chargeback review")
    token = _freeze_token(user)

    account_freeze(token=token)
    account_freeze(token=token)

    restriction = AccountRestriction.objects.get(user=user)
    assert restriction.withdrawals_reason == "chargeback review" and restriction.trading_frozen
    assert not get_user_model().objects.get(pk=user.pk).is_active


def test_an_altered_foreign_or_expired_link_freezes_nothing(settings):
    user = UserFactory(email="old@example.com")
    token = _freeze_token(user)
    request = EmailRequest.objects.filter(user=user).latest("id")

    for bad in (token[:-2] + "xx", signed_token_make(salt="accounts.email-request", payload={"id": request.pk})):
        with pytest.raises(InvalidLink):
            account_freeze(token=bad)
    settings.ACCOUNT_FREEZE_LINK_MAX_AGE = -1
    with pytest.raises(InvalidLink, match="expired"):
        account_freeze(token=signed_token_make(salt=SALT, payload={"id": request.pk}))

    assert get_user_model().objects.get(pk=user.pk).is_active
    assert not AccountRestriction.objects.filter(user=user).exists()
