"""The security page's e-mail card and the page the e-mailed link opens."""

import pytest
from django.contrib.auth import get_user_model

from apps.accounts.email_address import APPROVAL_SALT, SALT
from apps.accounts.models import EmailRequest
from apps.accounts.tests.otp import enrol_device, fresh_code
from apps.core.links import signed_token_make
from apps.ledger.tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db


def shown(client) -> str:
    """The security page as the browser lands on it after a POST (post/redirect/get)."""
    return client.get("/security/").content.decode()


def test_a_request_says_a_message_went_out_and_the_link_page_sets_the_address(client):
    user = UserFactory(username="carol", email="")
    client.force_login(user)

    response = client.post("/security/email/", {"email": "carol@example.com", "password": PASSWORD})

    assert (response.status_code, response.url) == (302, "/security/")
    page = shown(client)
    assert "We sent a message to carol@example.com" in page
    assert "None yet" in page
    (request,) = EmailRequest.objects.filter(user=user)
    path = f"/email/confirm/{signed_token_make(salt=SALT, payload={'id': request.pk})}/"
    client.logout()  # the link is the proof: no log-in needed
    assert "Confirm e-mail address" in client.get(path).content.decode()
    assert get_user_model().objects.get(pk=user.pk).email == ""  # a GET (a mail scanner) sets nothing
    done = client.post(path).content.decode()
    assert "carol@example.com</code> is now the e-mail address of the account carol" in done
    assert get_user_model().objects.get(pk=user.pk).email == "carol@example.com"


@pytest.mark.parametrize(
    ("sent", "says"),
    [
        ({"email": "not an address"}, "Enter a valid e-mail address"),
        ({"email": "\u212aelvin@example.com"}, "letters of the English alphabet before the @"),
        ({"email": "carol@example.com", "otp": "1" * 40}, "Ensure this value has at most 32 characters"),
    ],
)
def test_a_refused_request_is_shown_on_the_card_without_a_second_factor_too(client, sent, says):
    client.force_login(UserFactory(email=""))

    assert client.post("/security/email/", {**sent, "password": PASSWORD}).status_code == 302
    assert says in shown(client)
    assert not EmailRequest.objects.exists()


def test_with_the_second_factor_on_the_card_asks_for_a_code_and_refuses_without_one(client):
    user = UserFactory(email="")
    enrol_device(user)
    client.force_login(user)
    assert "Code from your authenticator app" in shown(client).split('id="second-factor"')[0]

    client.post("/security/email/", {"email": "carol@example.com"})
    card = shown(client).split('id="second-factor"')[0]
    assert "A valid code from your authenticator app (or a recovery code) is required." in card
    assert not EmailRequest.objects.exists()

    client.post("/security/email/", {"email": "carol@example.com", "otp": fresh_code(user)})
    assert "We sent a message to carol@example.com" in shown(client)


def test_past_the_days_requests_the_card_says_so(client, settings):
    settings.EMAIL_REQUESTS_PER_DAY = 1
    client.force_login(UserFactory(email=""))
    client.post("/security/email/", {"email": "one@example.com", "password": PASSWORD})
    client.get("/security/")

    client.post("/security/email/", {"email": "two@example.com", "password": PASSWORD})

    assert "Too many e-mail address requests today" in shown(client)


def test_a_huge_refused_value_is_not_kept_in_the_session(client):
    client.force_login(UserFactory(email=""))
    client.post("/security/email/", {"email": "x" * 100_000, "password": PASSWORD})
    assert len(shown(client)) < 50_000


def test_a_pending_change_is_shown_and_can_be_cancelled(client):
    user = UserFactory(email="carol@example.com")
    client.force_login(user)
    assert 'id="pending-email"' not in shown(client)
    client.post("/security/email/", {"email": "typo@exampel.com", "password": PASSWORD})
    page = shown(client)
    assert "We sent a message to your current address, carol@example.com" in page
    assert "approve changing your address to <code>typo@exampel.com</code> was sent to your current address" in page
    (request,) = EmailRequest.objects.filter(user=user)
    path = f"/email/approve/{signed_token_make(salt=APPROVAL_SALT, payload={'id': request.pk})}/"
    assert "Approve making <code>typo@exampel.com</code> the account's e-mail address" in (
        client.get(path).content.decode()  # the page names what it approves (break-it review)
    )

    assert client.post("/security/email/cancel/").status_code == 302

    page = shown(client)
    assert "Cancelled: the link we sent no longer works" in page
    assert 'id="pending-email"' not in page
    dead = client.get(path)  # no live button on a link that can no longer approve anything
    assert dead.status_code == 409 and "cancelled or replaced" in dead.content.decode()
    assert client.post(path).status_code == 409
    assert get_user_model().objects.get(pk=user.pk).email == "carol@example.com"


@pytest.mark.parametrize(
    ("password", "says"), [("", "Enter your account&#x27;s password"), ("guess", "not your password")]
)
def test_without_a_second_factor_a_session_alone_cannot_change_the_address(client, password, says):
    client.force_login(UserFactory(email="owner@example.com"))
    assert 'id="email-form-password"' in shown(client)

    assert client.post("/security/email/", {"email": "thief@example.com", "password": password}).status_code == 302

    assert says in shown(client).split('id="second-factor"')[0]
    assert not EmailRequest.objects.exists()
