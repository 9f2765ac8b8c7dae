"""Changing a password (signed in) and resetting it by an e-mailed link (Django's views): other sessions logged out,
each change audited and told by e-mail, reset requests that never say whether an account has the address."""

import hashlib

from django.contrib.auth import get_user_model
from django.core.cache import cache

from apps.accounts.tests.otp import code_now, enrol_device
from apps.audit.models import AuditLogEntry
from apps.ledger.tests.factories import PASSWORD, UserFactory

NEW = "a different horse, still correct"


def test_a_change_needs_the_current_password_logs_out_other_sessions_and_is_audited(
    client, db, django_capture_on_commit_callbacks
):
    from django.test import Client

    user = UserFactory(username="carol")
    client.force_login(user)
    elsewhere = Client()
    elsewhere.force_login(user)
    assert 'href="/accounts/password/change/"' in client.get("/security/").content.decode()

    wrong = client.post(
        "/accounts/password/change/", {"old_password": "guess", "new_password1": NEW, "new_password2": NEW}
    )
    assert wrong.status_code == 200 and wrong.context["form"].errors["old_password"]
    with django_capture_on_commit_callbacks() as mails:
        changed = client.post(
            "/accounts/password/change/", {"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW}
        )

    assert (changed.status_code, changed["Location"]) == (302, "/security/")
    assert len(mails) == 1  # "Your password was changed", to the account's address
    assert client.get("/security/").status_code == 200  # this session stays
    assert elsewhere.get("/security/")["Location"] == "/accounts/login/?next=/security/"  # every other one is out
    assert "_auth_user_id" not in elsewhere.session
    user.refresh_from_db()
    assert user.check_password(NEW) and not user.check_password(PASSWORD)
    assert AuditLogEntry.objects.filter(actor=user, action="password.changed", object_id=str(user.id)).count() == 1


def test_a_reset_by_the_e_mailed_link_logs_out_every_session_of_the_account(client, db):
    """Two browsers logged in as the owner; a third follows the reset link: neither of the two stays logged in, and
    the new password logs in."""
    from django.contrib.auth.tokens import default_token_generator
    from django.test import Client
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    user = UserFactory(username="carol")
    browsers = [Client(), Client()]
    for browser in browsers:
        browser.force_login(user)
        assert browser.get("/security/").status_code == 200
    uid = urlsafe_base64_encode(force_bytes(user.pk))

    link = client.get(f"/accounts/password/reset/{uid}/{default_token_generator.make_token(user)}/")
    reset = client.post(link["Location"], {"new_password1": NEW, "new_password2": NEW})

    assert (reset.status_code, reset["Location"]) == (302, "/accounts/login/")
    for browser in browsers:
        page = browser.get("/security/")
        assert (page.status_code, page["Location"]) == (302, "/accounts/login/?next=/security/")
        assert "_auth_user_id" not in browser.session
    logged_in = client.post("/accounts/login/", {"username": "carol", "password": NEW})
    assert (logged_in.status_code, logged_in["Location"]) == (302, "/wallet/")


def test_wrong_current_passwords_count_as_failed_log_ins_and_a_lockout_refuses_the_right_one(client, db, settings):
    """Review: Django's form only compared the password, so a stolen session guessed it without limit."""
    user = UserFactory()
    client.force_login(user)
    guess = {"old_password": "guess", "new_password1": NEW, "new_password2": NEW}
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post("/accounts/password/change/", guess)

    locked = client.post("/accounts/password/change/", {**guess, "old_password": PASSWORD})

    assert locked.status_code == 429
    user.refresh_from_db()
    assert user.check_password(PASSWORD)


def test_the_change_page_needs_a_log_in(client, db):
    assert client.get("/accounts/password/change/")["Location"].startswith("/accounts/login/")


def test_a_reset_request_answers_alike_for_any_address_and_mails_only_an_account(
    client, db, django_capture_on_commit_callbacks
):
    UserFactory(email="carol@example.com")
    # The cap of reset mails to one address lives an hour in Redis, which outlives a test session: three runs of this
    # test within the hour left the fourth one's mail unsent.
    cache.delete("password_reset_to:" + hashlib.sha256(b"carol@example.com").hexdigest())
    assert 'href="/accounts/password/reset/"' in client.get("/accounts/login/").content.decode()
    answers = []
    for address in ("nobody@example.com", "CAROL@example.com"):
        with django_capture_on_commit_callbacks() as mails:
            answers.append(client.post("/accounts/password/reset/", {"email": address}, follow=True))
        answers[-1].mails = len(mails)

    assert [(a.redirect_chain, a.mails) for a in answers] == [
        ([("/accounts/password/reset/sent/", 302)], 0),
        ([("/accounts/password/reset/sent/", 302)], 1),
    ]
    assert all('id="reset-sent"' in answer.content.decode() for answer in answers)  # the same page


def test_a_bad_reset_link_says_it_does_not_work_and_changes_nothing(client, db):
    user = UserFactory()
    page = client.get(f"/accounts/password/reset/{user.pk}/not-a-token/")
    assert page.status_code == 200 and 'id="link-invalid"' in page.content.decode()
    client.post(f"/accounts/password/reset/{user.pk}/not-a-token/", {"new_password1": NEW, "new_password2": NEW})
    user.refresh_from_db()
    assert user.check_password(PASSWORD)


def test_reset_requests_and_log_ins_are_rate_limited_per_client_ip(client, db, settings):
    rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**rates, "password_reset": "2/hour", "login": "2/min"},
    }
    address = "203.0.113.21"
    cache.delete_many([f"throttle:password_reset:{address}", f"throttle:login:{address}"])

    resets = [client.post("/accounts/password/reset/", {"email": "x@example.com"}, REMOTE_ADDR=address) for _ in "abc"]
    log_ins = [
        client.post("/accounts/login/", {"username": f"u{n}", "password": "guess"}, REMOTE_ADDR=address) for n in "abc"
    ]

    assert [r.status_code for r in resets] == [302, 302, 429]
    assert [r.status_code for r in log_ins] == [200, 200, 429]  # two refused passwords, then the address's cap
    assert "Too many log-ins from your network" in log_ins[2].content.decode()
    assert "Please enter a correct username" not in log_ins[2].content.decode()  # refused unchecked (review)
    assert not get_user_model().objects.exists()


def test_reset_links_to_one_address_are_capped_whoever_asks(client, db, django_capture_on_commit_callbacks):
    """Review: the per-IP rate let many addresses mail-bomb one victim."""
    from apps.accounts.password_resets import RESET_MAILS_PER_HOUR

    UserFactory(email="victim@example.com")
    cache.delete("password_reset_to:" + hashlib.sha256(b"victim@example.com").hexdigest())
    sent = []
    for n in range(RESET_MAILS_PER_HOUR + 2):
        with django_capture_on_commit_callbacks() as mails:
            answer = client.post(
                "/accounts/password/reset/", {"email": "victim@example.com"}, REMOTE_ADDR=f"198.51.100.{n}"
            )
        assert answer.status_code == 302  # answered alike
        sent.append(len(mails))
    assert sent == [1] * RESET_MAILS_PER_HOUR + [0, 0]


def test_with_a_second_factor_a_change_also_needs_a_current_code(client, db):
    """Break-it review: the old password alone, with a session, changed it (and logged the owner's other sessions
    out) though the account had a second factor."""
    user = UserFactory(username="carol")
    client.force_login(user)
    change = {"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW}
    device = enrol_device(user)
    assert 'name="otp"' in client.get("/accounts/password/change/").content.decode()

    for otp in ("", "000000"):
        refused = client.post("/accounts/password/change/", {**change, "otp": otp})
        assert refused.status_code == 200 and refused.context["form"].errors["otp"]
    user.refresh_from_db()
    assert user.check_password(PASSWORD)
    device.throttle_reset()  # the wrong code's wait, passed

    changed = client.post("/accounts/password/change/", {**change, "otp": code_now(device)})
    assert (changed.status_code, changed["Location"]) == (302, "/security/")
    user.refresh_from_db()
    assert user.check_password(NEW)


def test_a_log_in_or_a_new_password_sent_twice_is_refused_not_the_last_one_taken(client, db):
    """Break-it review: ``username=x&username=carol`` logged in as carol, and ``new_password1=A&new_password1=B`` set
    B, where the API refuses a repeated field."""
    from django.contrib.auth.tokens import default_token_generator
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    user = UserFactory(username="carol")
    twice = "This field was sent more than once: send it once."

    login = client.post("/accounts/login/", {"username": ["nobody", "carol"], "password": PASSWORD})
    assert login.status_code == 200 and login.context["form"].errors["username"] == [twice]
    assert "_auth_user_id" not in client.session
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    link = client.get(f"/accounts/password/reset/{uid}/{default_token_generator.make_token(user)}/")
    reset = client.post(link["Location"], {"new_password1": ["first try", NEW], "new_password2": NEW})
    assert reset.status_code == 200 and reset.context["form"].errors["new_password1"] == [twice]
    user.refresh_from_db()
    assert user.check_password(PASSWORD)
