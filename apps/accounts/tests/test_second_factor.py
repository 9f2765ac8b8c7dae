"""Traders' second factor: enrolment (secret, QR code, confirmation, recovery codes), checks, changes, audit."""

import base64
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.accounts.enrolment import second_factor_confirm, second_factor_enrol, second_factor_remove
from apps.accounts.errors import SecondFactorLocked
from apps.accounts.second_factor import (
    InvalidOtp,
    SecondFactorRequired,
    second_factor_require,
    second_factor_verify,
    user_has_second_factor,
)
from apps.accounts.tests.otp import enrol, totp_code, user_code
from apps.audit.models import AuditLogEntry
from apps.ledger.tests.factories import PASSWORD

pytestmark = pytest.mark.django_db


def test_enrolment_is_on_only_after_a_code_from_the_new_authenticator(user):
    enrolment = second_factor_enrol(user_id=user.id)

    device = TOTPDevice.objects.get(user=user)
    assert base64.b32decode(enrolment.secret) == device.bin_key
    assert enrolment.otpauth_url.startswith("otpauth://totp/Exchange%20back%20office%3A" + user.username)
    assert f"secret={enrolment.secret}" in enrolment.otpauth_url
    assert not user_has_second_factor(user_id=user.id)
    with pytest.raises(InvalidOtp):
        second_factor_confirm(user_id=user.id, otp="000000" if totp_code(device) != "000000" else "111111")
    assert not user_has_second_factor(user_id=user.id)
    device.refresh_from_db()
    device.throttle_reset()  # the wrong code throttles the next attempt for a second

    codes = second_factor_confirm(user_id=user.id, otp=totp_code(device))

    assert user_has_second_factor(user_id=user.id)
    assert len(codes) == 10 and len(set(codes)) == 10
    steps = AuditLogEntry.objects.filter(actor=user, object_type="second_factor").order_by("id")
    assert list(steps.values_list("action", "after")) == [
        ("second_factor.enrol", {"enabled": False}),
        ("second_factor.confirm", {"enabled": True}),
    ]
    # The back office's device audit records both devices made at confirmation, once each.
    devices = AuditLogEntry.objects.filter(actor=user, object_type="auth.user", action="second_factor.enrol")
    assert sorted(entry.after["type"] for entry in devices) == ["TOTP device", "static device"]


def test_a_code_works_once_and_a_recovery_code_once(user):
    codes = enrol(user)
    code = user_code(user)

    assert second_factor_verify(user_id=user.id, code=code)
    assert not second_factor_verify(user_id=user.id, code=code)  # replayed
    _wait_out_the_throttle(user)  # a refused code locks every code for a second
    assert second_factor_verify(user_id=user.id, code=codes[0].upper())
    assert not second_factor_verify(user_id=user.id, code=codes[0])
    _wait_out_the_throttle(user)
    assert second_factor_verify(user_id=user.id, code=codes[1])
    assert not second_factor_verify(user_id=user.id, code="")
    assert not second_factor_verify(user_id=user.id, code=None)


def test_a_wrong_code_counts_against_the_throttle_even_when_the_request_fails(user):
    enrol(user)
    with pytest.raises(InvalidOtp):
        second_factor_remove(user_id=user.id, otp="12345x")

    device = TOTPDevice.objects.get(user=user, confirmed=True)
    assert device.throttling_failure_count == 1
    with pytest.raises(SecondFactorLocked):  # throttled for a second
        second_factor_verify(user_id=user.id, code=totp_code(device))


def _wait_out_the_throttle(user) -> None:
    """As if the throttle's wait had passed: the last failure an hour ago (the count stays)."""
    an_hour_ago = timezone.now() - timedelta(hours=1)
    TOTPDevice.objects.filter(user=user).update(throttling_failure_timestamp=an_hour_ago)
    StaticDevice.objects.filter(user=user).update(throttling_failure_timestamp=an_hour_ago)


def _failures(user) -> list[dict]:
    return list(
        AuditLogEntry.objects.filter(actor=user, action="second_factor.failed", object_id=str(user.id))
        .order_by("id")
        .values_list("after", flat=True)
    )


def test_wrong_codes_lock_every_code_for_longer_each_time_and_each_is_audited(user, settings):
    settings.OTP_TOTP_THROTTLE_FACTOR = settings.OTP_STATIC_THROTTLE_FACTOR = 60  # 60 s, then 120 s, ...
    codes = enrol(user)
    device = TOTPDevice.objects.get(user=user, confirmed=True)
    wrong = "000000" if totp_code(device) != "000000" else "111111"

    with pytest.raises(InvalidOtp):
        second_factor_require(user_id=user.id, code=wrong)
    # A right code right after a wrong one is refused too, and says how long to wait.
    with pytest.raises(SecondFactorLocked) as locked:
        second_factor_require(user_id=user.id, code=totp_code(device))
    assert locked.value.code == "second_factor_locked" and locked.value.status == 429
    assert 0 < locked.value.retry_after <= 60
    assert locked.value.headers == {"Retry-After": str(locked.value.retry_after)}
    assert "otp" in locked.value.fields
    with pytest.raises(SecondFactorLocked):  # a recovery code is locked as well
        second_factor_require(user_id=user.id, code=codes[0])
    _wait_out_the_throttle(user)
    with pytest.raises(InvalidOtp):
        second_factor_require(user_id=user.id, code=wrong)
    with pytest.raises(SecondFactorLocked) as locked:
        second_factor_require(user_id=user.id, code=wrong)
    assert 60 < locked.value.retry_after <= 120  # twice as long after the second wrong code

    assert [(row["reason"], row["failures"]) for row in _failures(user)] == [
        ("wrong_code", 1),
        ("locked", 1),
        ("locked", 1),
        ("wrong_code", 2),
        ("locked", 2),
    ]
    _wait_out_the_throttle(user)
    second_factor_require(user_id=user.id, code=codes[0])  # a right code passes once the wait is over
    device.refresh_from_db()
    assert device.throttling_failure_count == 0  # and starts the count again


def test_a_wrong_code_is_counted_and_audited_even_when_the_caller_rolls_back(user):
    enrol(user)

    with pytest.raises(RuntimeError):  # the check commits on its own: it refuses to run inside a transaction
        with transaction.atomic():
            second_factor_verify(user_id=user.id, code="000000x")
    with pytest.raises(InvalidOtp):
        second_factor_remove(user_id=user.id, otp="000000x")

    assert TOTPDevice.objects.get(user=user, confirmed=True).throttling_failure_count == 1
    assert [row["reason"] for row in _failures(user)] == ["wrong_code"]


def test_withdrawing_needs_a_second_factor_and_a_valid_code(user):
    with pytest.raises(SecondFactorRequired):
        second_factor_require(user_id=user.id, code="123456")
    enrol(user)
    with pytest.raises(InvalidOtp):
        second_factor_require(user_id=user.id, code=None)
    second_factor_require(user_id=user.id, code=user_code(user))


def test_re_enrolling_needs_a_current_code_and_replaces_the_authenticator_once_confirmed(user):
    enrol(user)
    old = TOTPDevice.objects.get(user=user, confirmed=True)
    with pytest.raises(InvalidOtp):
        second_factor_enrol(user_id=user.id)

    second_factor_enrol(user_id=user.id, otp=user_code(user))
    assert TOTPDevice.objects.get(user=user, confirmed=True) == old  # the old one works until the new is confirmed
    new = TOTPDevice.objects.get(user=user, confirmed=False)
    second_factor_confirm(user_id=user.id, otp=totp_code(new))

    assert list(TOTPDevice.objects.filter(user=user)) == [new]


def test_removing_needs_a_current_code_and_is_audited(user):
    codes = enrol(user)
    with pytest.raises(InvalidOtp):
        second_factor_remove(user_id=user.id, otp=None)
    assert user_has_second_factor(user_id=user.id)

    second_factor_remove(user_id=user.id, otp=codes[3])

    assert not user_has_second_factor(user_id=user.id)
    assert not second_factor_verify(user_id=user.id, code=codes[4])  # recovery codes went with it
    assert AuditLogEntry.objects.filter(actor=user, action="second_factor.remove", after={"enabled": False}).exists()


def test_api_enrolment_and_confirmation(user, client):
    client.force_login(user)
    session_alone = client.post("/api/v1/account/otp/", {}, content_type="application/json")
    assert session_alone.status_code == 400 and session_alone.json()["error"]["fields"].keys() == {"password"}
    assert session_alone.json()["error"]["code"] == "invalid_password"
    guessed = client.post("/api/v1/account/otp/", {"password": "guess"}, content_type="application/json")
    assert guessed.status_code == 400 and guessed.json()["error"]["code"] == "invalid_password"
    assert not TOTPDevice.objects.filter(user=user).exists()
    started = client.post("/api/v1/account/otp/", {"password": PASSWORD}, content_type="application/json")
    assert started.status_code == 200
    secret = started.json()["secret"]
    device = TOTPDevice.objects.get(user=user, confirmed=False)
    assert base64.b32decode(secret) == device.bin_key

    wrong = client.post("/api/v1/account/otp/confirm/", {"otp": "abc"}, content_type="application/json")
    assert wrong.status_code == 400
    assert wrong.json()["error"]["code"] == "invalid_otp" and "otp" in wrong.json()["error"]["fields"]

    device.throttle_reset()
    confirmed = client.post("/api/v1/account/otp/confirm/", {"otp": totp_code(device)}, content_type="application/json")
    assert confirmed.status_code == 200
    assert confirmed.json()["enabled"] is True and len(confirmed.json()["recovery_codes"]) == 10

    again = client.post("/api/v1/account/otp/", {}, content_type="application/json")  # re-enrolling needs a code
    assert again.status_code == 400 and again.json()["error"]["code"] == "invalid_otp"


def test_a_read_only_key_cannot_enrol(user, api_as):
    response = api_as(user, "read", "trade").post("/api/v1/account/otp/", {}, format="json")
    assert response.status_code == 403
    assert not TOTPDevice.objects.filter(user=user).exists()


def test_security_page_shows_the_qr_code_and_secret_then_recovery_codes_once(user, client):
    client.force_login(user)
    assert "Off." in client.get("/security/").content.decode()

    assert client.post("/security/second-factor/", {"password": "guess"}).status_code == 302
    refused = client.get("/security/")
    assert refused.context["start_form"].errors["password"] == ["That is not your password."]
    assert not TOTPDevice.objects.filter(user=user).exists()
    started = client.post("/security/second-factor/", {"password": PASSWORD})
    assert started.status_code == 200 and "no-store" in started["Cache-Control"]
    page = started.content.decode()
    device = TOTPDevice.objects.get(user=user, confirmed=False)
    secret = base64.b32encode(device.bin_key).decode()
    assert f'<code class="secret" id="otp-secret">{secret}</code>' in page
    qr = page.split('id="otp-qr">')[1].split("</div>")[0]
    assert qr.startswith("<svg") and "<path" in qr and "<script" not in qr
    # Shown once: a later page of the session (a stolen cookie's too) asks for the code, never shows the secret.
    later = client.get("/security/").content.decode()
    assert secret not in later and 'id="otp-qr"' not in later and 'id="set-up-pending"' in later

    confirmed = client.post("/security/second-factor/confirm/", {"otp": totp_code(device)})
    assert confirmed.status_code == 200
    codes = confirmed.context["recovery_codes"]
    assert all(f"<li><code>{code}</code></li>" in confirmed.content.decode() for code in codes)
    later = client.get("/security/").content.decode()
    assert "recovery-codes" not in later and codes[0] not in later
    assert "On: withdrawals" in later

    refused = client.post("/security/second-factor/remove/", {"otp": "000000x"})
    assert (refused.status_code, refused["Location"]) == (302, "/security/")  # post/redirect/get
    assert user_has_second_factor(user_id=user.id)
    shown = client.get("/security/")
    assert shown.context["remove_form"].errors["otp"] and shown.context["remove_form"]["otp"].value() == "000000x"
    assert not client.get("/security/").context["remove_form"].is_bound  # shown once
    _wait_out_the_throttle(user)  # the wrong code locks every code for a second
    assert client.post("/security/second-factor/remove/", {"otp": codes[0]}).status_code == 302
    assert not user_has_second_factor(user_id=user.id)


@pytest.mark.django_db(transaction=True)
def test_one_recovery_code_used_twice_at_once_passes_once():
    from apps.ledger.tests.factories import UserFactory
    from apps.ledger.tests.threads import run_concurrently

    user = UserFactory()
    codes = enrol(user)

    results = run_concurrently([lambda: second_factor_verify(user_id=user.id, code=codes[0])] * 4)

    # One passes; the others find the code gone (a wrong code), then the throttle that wrong code set.
    assert results.count(True) == 1
    assert all(result is False or isinstance(result, SecondFactorLocked) for result in results if result is not True)


@pytest.mark.django_db(transaction=True)
def test_wrong_codes_sent_at_once_are_counted_one_by_one(settings):
    settings.OTP_TOTP_THROTTLE_FACTOR = settings.OTP_STATIC_THROTTLE_FACTOR = 3600
    from apps.ledger.tests.factories import UserFactory
    from apps.ledger.tests.threads import run_concurrently

    user = UserFactory()
    enrol(user)

    def guess() -> str:
        try:
            second_factor_verify(user_id=user.id, code="000000x")
        except SecondFactorLocked:
            return "locked"
        return "tried"

    results = run_concurrently([guess] * 4)

    # The device is locked while one code is checked: one guess was tried, the others found it throttled.
    assert sorted(results) == ["locked", "locked", "locked", "tried"]
    assert TOTPDevice.objects.get(user=user, confirmed=True).throttling_failure_count == 1


@pytest.mark.parametrize("code", ["²", "²²²²²²"])
def test_a_code_of_digits_int_cannot_read_is_a_wrong_code(user, client, code):
    """``str.isdigit()`` admits ``²``, which ``int()`` cannot read: the check whether a refused code was a used one
    raised ``ValueError``, a 500 (review); it is a wrong code like any other."""
    enrol(user)
    body = {"username": user.username, "password": PASSWORD, "otp": code}

    response = client.post("/api/v1/auth/token/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_otp" and "otp" in response.json()["error"]["fields"]


def test_answers_showing_a_new_authenticator_or_recovery_codes_are_never_stored(user, client):
    """Review: the pending authenticator's secret (API and security page) and the recovery codes (API and the page
    answering the confirmation) carry ``Cache-Control: no-store``, so no browser or proxy cache keeps them."""
    client.force_login(user)
    started = client.post("/api/v1/account/otp/", {"password": PASSWORD}, content_type="application/json")
    page = client.get("/security/")
    device = TOTPDevice.objects.get(user=user, confirmed=False)
    confirmed = client.post("/api/v1/account/otp/confirm/", {"otp": totp_code(device)}, content_type="application/json")
    second_factor_enrol(user_id=user.id, otp=user_code(user))
    replacement = TOTPDevice.objects.get(user=user, confirmed=False)
    confirmed_on_the_page = client.post("/security/second-factor/confirm/", {"otp": totp_code(replacement)})

    assert started.status_code == 200 and started.json()["secret"]
    assert page.context["pending"] is True
    assert confirmed.status_code == 200 and confirmed.json()["recovery_codes"]
    assert confirmed_on_the_page.status_code == 200 and confirmed_on_the_page.context["recovery_codes"]
    for response in (started, page, confirmed, confirmed_on_the_page):
        assert "no-store" in response.get("Cache-Control", ""), response.request["PATH_INFO"]
