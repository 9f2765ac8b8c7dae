"""Traders' second factor: enrolment (secret, QR code, confirmation, recovery codes), checks, changes, audit."""

import base64

import pytest
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.accounts.enrolment import second_factor_confirm, second_factor_enrol, second_factor_remove
from apps.accounts.second_factor import (
    InvalidOtp,
    SecondFactorRequired,
    second_factor_require,
    second_factor_verify,
    user_has_second_factor,
)
from apps.accounts.tests.otp import enrol, totp_code, user_code
from apps.audit.models import AuditLogEntry

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
    assert second_factor_verify(user_id=user.id, code=codes[0].upper())
    assert not second_factor_verify(user_id=user.id, code=codes[0])
    assert second_factor_verify(user_id=user.id, code=codes[1])
    assert not second_factor_verify(user_id=user.id, code="")
    assert not second_factor_verify(user_id=user.id, code=None)


def test_a_wrong_code_counts_against_the_throttle_even_when_the_request_fails(user):
    enrol(user)
    with pytest.raises(InvalidOtp):
        second_factor_remove(user_id=user.id, otp="12345x")

    device = TOTPDevice.objects.get(user=user, confirmed=True)
    assert device.throttling_failure_count == 1
    assert not second_factor_verify(user_id=user.id, code=totp_code(device))  # throttled for a second


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
    started = client.post("/api/v1/account/otp/", {}, content_type="application/json")
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

    assert client.post("/security/second-factor/").status_code == 302
    page = client.get("/security/").content.decode()
    device = TOTPDevice.objects.get(user=user, confirmed=False)
    secret = base64.b32encode(device.bin_key).decode()
    assert f'<code class="secret" id="otp-secret">{secret}</code>' in page
    qr = page.split('id="otp-qr">')[1].split("</div>")[0]
    assert qr.startswith("<svg") and "<path" in qr and "<script" not in qr

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
    assert client.post("/security/second-factor/remove/", {"otp": codes[0]}).status_code == 302
    assert not user_has_second_factor(user_id=user.id)


@pytest.mark.django_db(transaction=True)
def test_one_recovery_code_used_twice_at_once_passes_once():
    from apps.ledger.tests.factories import UserFactory
    from apps.ledger.tests.threads import run_concurrently

    user = UserFactory()
    codes = enrol(user)

    results = run_concurrently([lambda: second_factor_verify(user_id=user.id, code=codes[0])] * 4)

    assert sorted(results) == [False, False, False, True]
