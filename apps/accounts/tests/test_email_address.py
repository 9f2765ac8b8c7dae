"""A trader's e-mail address, set only by the link sent to it (what the messages say, and their delivery, is tested
end to end in apps/wallets/tests/test_emails.py)."""

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.email_address import (
    SALT,
    EmailInUse,
    TooManyEmailRequests,
    email_address_confirm,
    email_change_approve,
    email_confirmation_send,
    email_normalized,
    email_requests_cancel,
)
from apps.accounts.models import EmailRequest
from apps.accounts.second_factor import InvalidOtp
from apps.accounts.tests.email_links import approval_for, link_for
from apps.accounts.tests.otp import enrol_device, fresh_code
from apps.audit.models import AuditLogEntry
from apps.core.errors import DomainError, InvalidState, NotFound
from apps.core.links import MAX_TOKEN_LENGTH, InvalidLink, signed_token_make
from apps.ledger.tests.factories import UserFactory
from exchange.tests.concurrency import run_concurrently

pytestmark = pytest.mark.django_db


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
    token = link_for(user, "new@example.com")

    with django_capture_on_commit_callbacks() as callbacks:
        email_address_confirm(token=token)

    assert email_of(user) == "new@example.com"
    assert len(callbacks) == 1


def test_a_newer_request_retires_the_older_links():
    user = UserFactory(email="")
    first, second = link_for(user, "first@example.com"), link_for(user, "second@example.com")

    with pytest.raises(InvalidState, match="newer request"):
        email_address_confirm(token=first)
    email_address_confirm(token=second)
    assert email_of(user) == "second@example.com"


def test_a_used_link_stays_used_when_the_account_returns_to_the_address_it_replaced():
    # A -> B -> A: the link that set B must not set it again (it named the request, not the addresses).
    user = UserFactory(email="a@example.com")
    to_b = link_for(user, "b@example.com")
    email_address_confirm(token=to_b)
    email_address_confirm(token=link_for(get_user_model().objects.get(pk=user.pk), "a@example.com"))

    with pytest.raises(InvalidState):
        email_address_confirm(token=to_b)
    assert email_of(user) == "a@example.com"


def test_a_cancelled_change_keeps_the_address_and_its_link_no_longer_works():
    user = UserFactory(email="carol@example.com")
    token = link_for(user, "typo@exampel.com")

    assert email_requests_cancel(user_id=user.id) == 1

    with pytest.raises(InvalidState):
        email_address_confirm(token=token)
    assert email_of(user) == "carol@example.com"
    assert email_requests_cancel(user_id=user.id) == 0


def test_the_longest_addresses_get_a_link_that_works():
    user = UserFactory(email="x" * 60 + "@" + "a" * 60 + ".example.com")
    longest = "y" * 64 + "@" + ("b" * 59 + ".") * 2 + "b" * 57 + ".example.com"
    assert len(longest) == 254
    token = link_for(user, longest)

    assert len(token) < MAX_TOKEN_LENGTH
    email_address_confirm(token=token)
    assert email_of(user) == longest


def test_an_altered_foreign_or_expired_link_changes_nothing(settings):
    user = UserFactory(email="")
    token = link_for(user, "carol@example.com")
    request_id = EmailRequest.objects.get(user=user).pk
    foreign = signed_token_make(salt="wallets.link.withdrawal", payload={"id": request_id})
    shapeless = signed_token_make(salt=SALT, payload={"id": str(request_id)})

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
    assert EmailRequest.objects.get(user=user).confirmed_at is None


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
    assert EmailRequest.objects.get(user=user).link_sent is not taken


def test_a_user_may_ask_a_few_times_a_day_then_is_refused(settings):
    settings.EMAIL_REQUESTS_PER_DAY = 2
    user = UserFactory(email="")
    email_confirmation_send(user_id=user.id, email="one@example.com")
    email_confirmation_send(user_id=user.id, email="two@example.com")

    with pytest.raises(TooManyEmailRequests) as refused:
        email_confirmation_send(user_id=user.id, email="three@example.com")

    assert (refused.value.status, refused.value.code) == (429, "too_many_requests")
    assert EmailRequest.objects.filter(user=user).count() == 2


@pytest.mark.parametrize("taken", [False, True])
def test_an_address_gets_a_few_messages_a_day_then_none_whoever_asks(
    taken, settings, django_capture_on_commit_callbacks
):
    settings.EMAIL_REQUESTS_PER_DAY = 2
    if taken:
        UserFactory(email="victim@example.com")
    senders = [UserFactory(email="") for _ in range(3)]

    with django_capture_on_commit_callbacks() as callbacks:
        for sender in senders:
            assert email_confirmation_send(user_id=sender.id, email="Victim@example.com") == "Victim@example.com"

    assert len(callbacks) == 2  # the third is answered alike and recorded, but nothing more is sent
    sent = EmailRequest.objects.filter(email__iexact="victim@example.com").values_list("message_sent", flat=True)
    assert sorted(sent) == [False, True, True]


@pytest.mark.parametrize(
    "email",
    [
        "not an address",
        "a" * 250 + "@x.io",
        "\u212aelvin@example.com",  # the Kelvin sign: "kelvin@" once lower-cased
        "\u017fomeone@example.com",  # the long s: "someone@" once upper-cased
        "al\u0131ce@example.com",  # the dotless i
        "line@example.com\nBcc: x@example.com",
        "a@[127.0.0.1]",  # a domain literal: no mail domain
        "l" * 65 + "@example.com",  # local parts are at most 64 characters (RFC 5321)
        '"<script>alert(1)</script>"@example.com',  # a quoted string (break-it review): only dot-atoms
        '"a b"@example.com',
        "a..b@example.com",
    ],
)
def test_an_invalid_or_non_ascii_local_part_is_refused_on_its_field(email, django_capture_on_commit_callbacks):
    user = UserFactory(email="")
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(DomainError) as refused:
        email_confirmation_send(user_id=user.id, email=email)
    assert "valid e-mail address" in refused.value.fields["email"]
    assert callbacks == []
    assert not EmailRequest.objects.exists()


@pytest.mark.parametrize(
    ("typed", "kept"),
    [
        (" Jo@Bücher.Example ", "Jo@xn--bcher-kva.example"),
        ("a@straße.de", "a@xn--strae-oqa.de"),  # IDNA 2008: not strasse.de, another domain (IDNA 2003)
        ("o'brien+tag@example.com", "o'brien+tag@example.com"),  # a dot-atom's symbols are letters too
    ],
)
def test_an_internationalised_domain_is_kept_in_its_ascii_form(typed, kept):
    assert email_normalized(typed) == kept


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
    assert not EmailRequest.objects.exists()


def test_a_wrong_code_counts_against_the_user_though_nothing_is_sent():
    user = UserFactory(email="carol@example.com")
    enrol_device(user)
    with pytest.raises(InvalidOtp):
        email_confirmation_send(user_id=user.id, email="new@example.com", otp="000000")
    assert AuditLogEntry.objects.filter(actor=user, action="second_factor.failed").exists()


def test_with_the_second_factor_on_a_current_code_lets_the_approval_link_go(django_capture_on_commit_callbacks):
    user = UserFactory(email="carol@example.com")
    with django_capture_on_commit_callbacks() as callbacks:
        email_confirmation_send(user_id=user.id, email="new@example.com", otp=fresh_code(user))
    assert len(callbacks) == 1  # the approval link to the current address; nothing to the new one yet


def test_a_change_of_address_writes_to_the_new_one_only_once_the_current_one_approves(
    django_capture_on_commit_callbacks,
):
    """Break-it review: with the password alone, whoever had it moved the address to their own mailbox (the current
    address was only told) and, with it, the confirmations of withdrawal addresses and withdrawals."""
    user = UserFactory(email="owner@example.com")
    with django_capture_on_commit_callbacks() as asked:
        email_confirmation_send(user_id=user.id, email="thief@example.com")
    (request,) = EmailRequest.objects.filter(user=user)
    assert (request.approval_needed, request.approved_at, request.link_sent, request.message_sent) == (
        True,
        None,
        False,
        False,
    )
    assert len(asked) == 1  # the approval link, to owner@example.com
    unapproved = signed_token_make(salt=SALT, payload={"id": request.pk})  # as if a link had gone to the new one
    with pytest.raises(NotFound):
        email_address_confirm(token=unapproved)
    with pytest.raises(InvalidLink):  # a confirmation link is not an approval, nor the reverse
        email_change_approve(token=unapproved)
    with pytest.raises(InvalidLink):
        email_address_confirm(token=approval_for(request))

    with django_capture_on_commit_callbacks() as approved:
        email_change_approve(token=approval_for(request))

    request.refresh_from_db()
    assert request.approved_at is not None and request.link_sent and request.message_sent
    assert len(approved) == 1  # now the link to thief@example.com
    (audit,) = AuditLogEntry.objects.filter(action="email.change_approved")
    assert (audit.actor_id, audit.before, audit.after) == (
        user.id,
        {"email": "owner@example.com"},
        {"email": "thief@example.com"},
    )
    with pytest.raises(InvalidState, match="used already"):
        email_change_approve(token=approval_for(request))
    email_address_confirm(token=unapproved)
    assert email_of(user) == "thief@example.com"


def test_a_cancelled_or_replaced_change_cannot_be_approved():
    user = UserFactory(email="owner@example.com")
    email_confirmation_send(user_id=user.id, email="first@example.com")
    first = EmailRequest.objects.get(user=user)
    email_confirmation_send(user_id=user.id, email="second@example.com")
    second = EmailRequest.objects.filter(user=user).latest("id")
    email_requests_cancel(user_id=user.id)

    for request in (first, second):
        with pytest.raises(InvalidState, match="cancelled or replaced"):
            email_change_approve(token=approval_for(request))
    assert not EmailRequest.objects.filter(approved_at__isnull=False).exists()
    assert email_of(user) == "owner@example.com"


def test_the_database_refuses_a_message_to_the_new_address_before_the_current_one_approves():
    user = UserFactory(email="owner@example.com")
    for fields in ({"link_sent": True}, {"message_sent": True}):
        with pytest.raises(IntegrityError), transaction.atomic():
            EmailRequest.objects.create(
                user=user,
                email="x@example.com",
                approval_needed=True,
                **{"link_sent": False, "message_sent": False, **fields},
            )


def test_the_database_refuses_a_confirmed_request_that_had_no_link_or_was_retired():
    user = UserFactory(email="")
    now = timezone.now()
    for fields in ({"link_sent": False}, {"link_sent": True, "superseded_at": now}):
        with pytest.raises(IntegrityError), transaction.atomic():
            EmailRequest.objects.create(user=user, email="x@example.com", message_sent=True, confirmed_at=now, **fields)


@pytest.mark.django_db(transaction=True)
def test_a_link_confirmed_while_its_user_asks_again_never_deadlocks():
    # The confirm and a new request lock the user's row first, then the requests: one waits for the other.
    for n in range(8):
        user = UserFactory(email="")
        token = link_for(user, f"first{n}@example.com")
        confirmed, asked = run_concurrently(
            lambda token=token: email_address_confirm(token=token),
            lambda user=user, n=n: email_confirmation_send(user_id=user.id, email=f"second{n}@example.com"),
        )
        assert asked == f"second{n}@example.com"
        assert not isinstance(confirmed, Exception) or isinstance(confirmed, InvalidState), confirmed


@pytest.mark.django_db(transaction=True)
def test_an_address_asked_for_by_many_at_once_gets_no_more_than_its_days_messages(settings):
    settings.EMAIL_REQUESTS_PER_DAY = 2
    senders = [UserFactory(email="") for _ in range(6)]

    answers = run_concurrently(
        *(
            lambda sender=sender: email_confirmation_send(user_id=sender.id, email="victim@example.com")
            for sender in senders
        )
    )

    assert answers == ["victim@example.com"] * 6
    assert EmailRequest.objects.filter(email="victim@example.com", message_sent=True).count() == 2
