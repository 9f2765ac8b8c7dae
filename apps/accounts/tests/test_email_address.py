"""A trader's e-mail address, set only by the link sent to it (what the messages say, and their delivery, is tested
end to end in apps/wallets/tests/test_emails.py)."""

import pytest
from django.contrib.auth import get_user_model

from apps.accounts.email_address import (
    SALT,
    EmailInUse,
    email_address_confirm,
    email_confirmation_send,
)
from apps.accounts.second_factor import InvalidOtp
from apps.accounts.tests.otp import enrol_device, fresh_code
from apps.audit.models import AuditLogEntry
from apps.core.errors import DomainError, InvalidState
from apps.core.links import InvalidLink, signed_token_make
from apps.ledger.tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def link_for(user, email: str) -> str:
    """The token of the link :func:`email_confirmation_send` e-mails for ``email`` now."""
    return signed_token_make(salt=SALT, payload={"id": user.id, "email": email, "was": user.email})


def email_of(user) -> str:
    return get_user_model().objects.get(pk=user.pk).email


def test_the_link_sets_the_address_once_and_the_change_is_audited(django_capture_on_commit_callbacks):
    user = UserFactory(email="")
    token = link_for(user, "carol@example.com")

    with django_capture_on_commit_callbacks() as callbacks:
        confirmed = email_address_confirm(token=token)

    assert confirmed.email == email_of(user) == "carol@example.com"
    assert callbacks == []  # there was no address before to tell
    (audit,) = AuditLogEntry.objects.filter(action="email.confirmed")
    assert (audit.actor_id, audit.before, audit.after) == (user.id, {"email": ""}, {"email": "carol@example.com"})
    with pytest.raises(InvalidState, match="used already"):
        email_address_confirm(token=token)


def test_a_change_tells_the_address_it_replaces(django_capture_on_commit_callbacks):
    user = UserFactory(email="old@example.com")

    with django_capture_on_commit_callbacks() as callbacks:
        email_address_confirm(token=link_for(user, "new@example.com"))

    assert email_of(user) == "new@example.com"
    assert len(callbacks) == 1


def test_an_older_link_cannot_undo_a_later_change():
    user = UserFactory(email="")
    first, second = link_for(user, "first@example.com"), link_for(user, "second@example.com")
    email_address_confirm(token=second)

    with pytest.raises(InvalidState):
        email_address_confirm(token=first)
    assert email_of(user) == "second@example.com"


def test_an_altered_foreign_or_expired_link_changes_nothing(settings):
    user = UserFactory(email="")
    token = link_for(user, "carol@example.com")
    foreign = signed_token_make(salt="wallets.link.withdrawal", payload={"id": user.id, "email": "x@example.com"})
    shapeless = signed_token_make(salt=SALT, payload={"id": str(user.id), "email": "x@example.com", "was": ""})

    for bad in (token + "x", token[:-2], foreign, shapeless, "", "x" * 400):
        with pytest.raises(InvalidLink):
            email_address_confirm(token=bad)
    settings.EMAIL_CONFIRMATION_MAX_AGE = -1  # every link is too old
    with pytest.raises(InvalidLink, match="expired"):
        email_address_confirm(token=token)
    assert email_of(user) == ""
    assert not AuditLogEntry.objects.filter(action="email.confirmed").exists()


def test_an_address_another_account_confirmed_first_is_refused_to_the_link_opener():
    user = UserFactory(email="")
    token = link_for(user, "Shared@example.com")
    UserFactory(email="shared@example.com")

    with pytest.raises(EmailInUse) as refused:
        email_address_confirm(token=token)

    assert (refused.value.status, refused.value.code, refused.value.fields) == (
        409,
        "email_in_use",
        {"email": "This e-mail address is already in use."},
    )
    assert email_of(user) == ""


@pytest.mark.parametrize("taken", [False, True])
def test_asking_queues_one_message_and_answers_alike_whoever_has_the_address(taken, django_capture_on_commit_callbacks):
    if taken:
        UserFactory(email="dave@example.com")
    user = UserFactory(email="")

    with django_capture_on_commit_callbacks() as callbacks:
        answer = email_confirmation_send(user_id=user.id, email="dave@EXAMPLE.com")

    assert answer == "dave@example.com"  # the domain lower-cased (Django's normalize_email)
    assert len(callbacks) == 1  # a link, or a notice to the address's owner: nothing else tells them apart
    assert email_of(user) == ""  # set only by the link


@pytest.mark.parametrize(("email", "says"), [("not an address", "valid"), ("a" * 250 + "@x.io", "valid")])
def test_an_invalid_address_is_refused_on_its_field(email, says, django_capture_on_commit_callbacks):
    user = UserFactory(email="")
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(DomainError) as refused:
        email_confirmation_send(user_id=user.id, email=email)
    assert says in refused.value.fields["email"]
    assert callbacks == []


def test_the_users_own_address_is_refused():
    user = UserFactory(email="carol@example.com")
    with pytest.raises(DomainError, match="your e-mail address already"):
        email_confirmation_send(user_id=user.id, email="Carol@example.com")


@pytest.mark.parametrize("code", [None, "000000"])
def test_with_the_second_factor_on_a_missing_or_wrong_code_is_refused(code, django_capture_on_commit_callbacks):
    user = UserFactory(email="carol@example.com")
    enrol_device(user)

    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(InvalidOtp):
        email_confirmation_send(user_id=user.id, email="new@example.com", otp=code)
    assert callbacks == []


def test_with_the_second_factor_on_a_current_code_lets_the_link_go(django_capture_on_commit_callbacks):
    user = UserFactory(email="carol@example.com")
    with django_capture_on_commit_callbacks() as callbacks:
        email_confirmation_send(user_id=user.id, email="new@example.com", otp=fresh_code(user))
    assert len(callbacks) == 1
