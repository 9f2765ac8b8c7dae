"""The web log-in asks a user with a second factor for a code after the password; the session is then
otp-verified. A user without one is logged in by the password alone."""

import pytest
from django.contrib.auth import get_user_model
from django_otp import DEVICE_ID_SESSION_KEY

from apps.accounts.tests.otp import code_now, enrol, enrol_device
from apps.audit.models import AuditLogEntry
from apps.ledger.tests.factories import UserFactory

PASSWORD = "correct horse battery staple"


@pytest.fixture
def bob(db):
    return UserFactory(username="bob")


def _password_step(client, **extra):
    return client.post("/accounts/login/", {"username": "bob", "password": PASSWORD, **extra})


def test_a_user_with_a_second_factor_is_not_logged_in_by_the_password_alone(client, bob):
    device = enrol_device(bob)

    first = _password_step(client)

    assert first.status_code == 302 and first["Location"] == "/accounts/login/second-factor/"
    assert client.get("/api-keys/").status_code == 302  # not logged in yet
    assert client.get("/accounts/login/second-factor/").status_code == 200
    second = client.post("/accounts/login/second-factor/", {"otp": code_now(device)})
    assert second.status_code == 302 and second["Location"] == "/wallet/"
    assert client.session[DEVICE_ID_SESSION_KEY] == device.persistent_id
    page = client.get("/api-keys/")
    assert page.status_code == 200 and page.wsgi_request.user.is_verified()


def test_the_second_step_keeps_the_next_page(client, bob):
    device = enrol_device(bob)
    _password_step(client, next="/activity/")
    assert client.post("/accounts/login/second-factor/", {"otp": code_now(device)})["Location"] == "/activity/"


def test_a_wrong_or_used_code_is_refused_and_logs_nobody_in(client, bob):
    device = enrol_device(bob)
    code = code_now(device)
    wrong = "000000" if code != "000000" else "111111"
    _password_step(client)

    refused = client.post("/accounts/login/second-factor/", {"otp": wrong})

    assert refused.status_code == 400 and "valid code" in refused.context["form"].errors["otp"][0]
    assert "_auth_user_id" not in client.session
    device.refresh_from_db()
    device.throttling_failure_count = 0  # django-otp slows the next try down after a failure
    device.save()
    assert client.post("/accounts/login/second-factor/", {"otp": code}).status_code == 302
    client.post("/accounts/logout/")
    _password_step(client)
    reused = client.post("/accounts/login/second-factor/", {"otp": code})
    assert reused.status_code == 400 and "already used" in reused.context["form"].errors["otp"][0]


def test_wrong_codes_lock_the_second_step_even_for_the_right_code_and_are_audited(client, bob, settings):
    settings.OTP_TOTP_THROTTLE_FACTOR = settings.OTP_STATIC_THROTTLE_FACTOR = 60
    device = enrol_device(bob)
    code = code_now(device)
    wrong = "000000" if code != "000000" else "111111"
    _password_step(client)

    refused = [client.post("/accounts/login/second-factor/", {"otp": wrong}) for _ in range(3)]
    locked = client.post("/accounts/login/second-factor/", {"otp": code})

    assert [response.status_code for response in refused] == [400, 429, 429]
    assert locked.status_code == 429 and "Too many wrong codes" in locked.context["form"].errors["otp"][0]
    assert "_auth_user_id" not in client.session
    failures = AuditLogEntry.objects.filter(actor=bob, action="second_factor.failed").order_by("id")
    assert [entry.after["reason"] for entry in failures] == ["wrong_code", "locked", "locked", "locked"]


def test_a_recovery_code_logs_in_once(client, bob):
    recovery = enrol(bob)[0]
    _password_step(client)
    assert client.post("/accounts/login/second-factor/", {"otp": recovery}).status_code == 302
    assert client.get("/api-keys/").wsgi_request.user.is_verified()


def test_the_second_step_without_the_password_step_goes_back_to_the_log_in(client, bob):
    enrol_device(bob)
    response = client.post("/accounts/login/second-factor/", {"otp": "123456"})
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert "_auth_user_id" not in client.session


def test_an_account_deactivated_between_the_steps_is_not_logged_in(client, bob):
    device = enrol_device(bob)
    _password_step(client)
    get_user_model().objects.filter(pk=bob.pk).update(is_active=False)
    response = client.post("/accounts/login/second-factor/", {"otp": code_now(device)})
    assert response["Location"] == "/accounts/login/" and "_auth_user_id" not in client.session


def test_a_user_without_a_second_factor_logs_in_with_the_password(client, bob):
    response = _password_step(client)
    assert response.status_code == 302 and response["Location"] == "/wallet/"
    assert client.get("/api-keys/").status_code == 200


def test_a_session_ends_twelve_hours_after_its_log_in_whatever_is_written_to_it(client, bob, settings):
    from datetime import timedelta

    from django.contrib.sessions.models import Session
    from django.utils import timezone

    client.force_login(bob)
    session = Session.objects.get(session_key=client.session.session_key)
    assert timedelta(seconds=settings.SESSION_COOKIE_AGE) == timedelta(hours=12)
    assert abs(session.expire_date - (timezone.now() + timedelta(hours=12))) < timedelta(seconds=30)

    client.post("/security/email/", {"email": "not an address"})  # a refused form written to the session
    kept = Session.objects.get(pk=session.pk)
    assert kept.get_decoded().keys() > {"refused-form:security-email"} and kept.expire_date == session.expire_date

    Session.objects.filter(pk=session.pk).update(expire_date=timezone.now() - timedelta(seconds=1))
    assert client.get("/wallet/")["Location"].startswith("/accounts/login/")


def test_the_admins_log_in_is_this_log_in_and_asks_a_staff_user_for_the_code(client, bob):
    """Django's admin log-in logged a session in with the password alone, which then opened every trader page of a
    user with a second factor (break-it review): /admin/login/ is this log-in, in two steps for such a user."""
    bob.is_staff = True
    bob.save()
    device = enrol_device(bob)

    posted = client.post("/admin/login/", {"username": "bob", "password": PASSWORD})
    shown = client.get("/admin/login/?next=/admin/backoffice/")

    assert posted.status_code == 302 and posted["Location"] == "/accounts/login/?next=/admin/"
    assert shown.status_code == 302 and shown["Location"] == "/accounts/login/?next=/admin/backoffice/"
    assert "_auth_user_id" not in client.session
    password_step = _password_step(client, next="/admin/backoffice/")
    assert password_step["Location"] == "/accounts/login/second-factor/"
    assert client.get("/api-keys/").status_code == 302  # not logged in yet
    second = client.post("/accounts/login/second-factor/", {"otp": code_now(device)})
    assert second["Location"] == "/admin/backoffice/"
    assert client.get("/admin/").status_code == 200


def test_the_admins_password_change_is_this_sites(client, bob):
    """Break-it review: Django's admin password change let a stolen staff session guess the current password without
    limit, and changed it with no audit, e-mail or withdrawal pause: it is the traders' page (apps/web/passwords.py)."""
    bob.is_staff = True
    bob.save()
    client.force_login(bob)

    response = client.get("/admin/password_change/")

    assert response.status_code == 302 and response["Location"] == "/accounts/password/change/"


def test_a_customer_logged_in_is_refused_the_admin_not_sent_round_to_the_log_in(client, bob):
    """Break-it review: /admin/ sent a logged-in customer to /admin/login/, then to the log-in form, which sent them
    back to /admin/ once logged in again, round and round."""
    client.force_login(bob)

    sent = client.get("/admin/")
    refused = client.get(sent["Location"])

    assert sent["Location"] == "/admin/login/?next=/admin/"
    assert refused.status_code == 403
