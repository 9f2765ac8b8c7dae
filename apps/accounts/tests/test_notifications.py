"""What the notification e-mails say (their delivery is tested end to end in apps/wallets/tests/test_emails.py)."""

import pytest
from django.template.loader import render_to_string

from apps.accounts.notifications import email_user_on_commit
from apps.accounts.tasks import email_send
from apps.accounts.tests.mail import body
from apps.ledger.tests.factories import UserFactory


class _Withdrawal:
    id = 7
    address = "sim1destination"

    class asset:  # noqa: N801 (a stand-in for the Asset row the template reads)
        code = "USDT"


@pytest.mark.parametrize(
    ("reason", "says"),
    [("Address on a sanctions list", "Reason: Address on a sanctions list"), ("", "No reason was given")],
)
def test_a_rejection_gives_the_operators_reason_or_says_none_was_given(reason, says):
    text = render_to_string(
        "emails/withdrawal_rejected.txt",
        {"withdrawal": _Withdrawal, "amount": "50.000000", "fee": "1.000000", "reason": reason, "user": None},
    )
    subject, _, body = text.strip().partition("\n")
    assert subject == "Withdrawal rejected: 50.000000 USDT"
    assert says in body


@pytest.mark.django_db
def test_a_user_without_an_e_mail_address_is_skipped(django_capture_on_commit_callbacks):
    user = UserFactory(email="")
    with django_capture_on_commit_callbacks() as callbacks:
        assert email_user_on_commit(user_id=user.id, template="new_login", context={}) is False
    assert callbacks == []


def test_the_task_sends_one_plain_text_message_through_djangos_smtp_backend(smtp_server):
    email_send("trader@example.com", "Subject line", "Body\n")

    (message,) = smtp_server.mailbox.wait_for(1)
    assert (message["To"], message["Subject"]) == ("trader@example.com", "Subject line")
    assert message["From"] == "Exchange <no-reply@exchange.localhost>"
    assert body(message).splitlines() == ["Body"]  # SMTP carries CRLF line ends


@pytest.mark.parametrize("hours, says", [(1, "within 1 hour to"), (2, "within 2 hours to")])
def test_the_reset_link_says_its_hours_in_good_english(hours, says):
    """Break-it review: a reset link valid for one hour was to be opened "within 1 hours"."""
    text = render_to_string("emails/password_reset.txt", {"username": "ann", "link": "https://x/", "hours": hours})

    assert says in text
