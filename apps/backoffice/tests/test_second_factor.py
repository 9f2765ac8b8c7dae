import pytest
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.audit.models import AuditLogEntry


def current_code(device: TOTPDevice) -> str:
    return f"{totp(device.bin_key, step=device.step, t0=device.t0, digits=device.digits):06d}"


def test_an_approver_must_enrol_and_confirm_a_one_time_password(client, approver):
    client.force_login(approver)

    response = client.get("/admin/backoffice/withdrawalapproval/")
    assert response.status_code == 302
    assert response.url == "/admin/second-factor/?next=/admin/backoffice/withdrawalapproval/"
    enrolment = client.get(response.url)
    assert 'id="totp-secret"' in enrolment.content.decode()
    assert "no-store" in enrolment["Cache-Control"]  # break-it review: the secret was cacheable
    device = TOTPDevice.objects.get(user=approver, confirmed=False)

    confirmed = client.post(response.url, {"token": current_code(device)})
    assert confirmed.url == "/admin/backoffice/withdrawalapproval/"
    assert client.get("/admin/backoffice/withdrawalapproval/").status_code == 200
    assert TOTPDevice.objects.get(user=approver).confirmed


def test_a_wrong_code_keeps_the_admin_closed(client, approver):
    client.force_login(approver)
    client.get("/admin/second-factor/")
    device = TOTPDevice.objects.get(user=approver)
    wrong = client.post("/admin/second-factor/", {"token": "000000" if current_code(device) != "000000" else "111111"})
    assert "not valid" in wrong.content.decode()
    assert client.get("/admin/").status_code == 302
    assert not TOTPDevice.objects.get(user=approver).confirmed


def test_a_decision_posted_without_the_second_factor_does_nothing(client, approver):
    client.force_login(approver)
    response = client.post("/admin/backoffice/withdrawalapproval/1/decide/", {"decision": "approve"})
    assert response.status_code == 302
    assert response.url.startswith("/admin/second-factor/")


def test_operators_who_cannot_approve_need_no_second_factor(client, operator):
    client.force_login(operator)
    assert client.get("/admin/").status_code == 200


def test_every_approval_permission_asks_for_the_second_factor(client, operator):
    """Break-it review: a user who may approve only market changes was never asked to enrol, so could never approve;
    every ``approve_*`` permission there is counts, alone."""
    from django.contrib.auth.models import Permission

    from apps.backoffice.second_factor import APPROVER_PERMISSIONS

    approvals = {
        f"{app_label}.{codename}"
        for app_label, codename in Permission.objects.filter(codename__startswith="approve_").values_list(
            "content_type__app_label", "codename"
        )
    }
    assert approvals == set(APPROVER_PERMISSIONS)
    market_changes = Permission.objects.get(codename="approve_marketchange")
    operator.user_permissions.add(market_changes)
    client.force_login(operator)
    response = client.get("/admin/")
    assert response.status_code == 302 and response.url.startswith("/admin/second-factor/")


def test_the_next_parameter_cannot_send_an_approver_elsewhere(client, approver):
    client.force_login(approver)
    client.get("/admin/second-factor/")
    device = TOTPDevice.objects.get(user=approver)
    response = client.post("/admin/second-factor/?next=https://evil.example/", {"token": current_code(device)})
    assert response.url == "/admin/"


def test_a_trader_cannot_open_the_second_factor_page(client, user):
    client.force_login(user)
    response = client.get("/admin/second-factor/")
    assert response.status_code == 302
    assert response.url.startswith("/admin/login/")


@pytest.mark.parametrize("prefix", ["/exchange", "/ops/exchange"])
def test_an_approver_needs_the_second_factor_under_a_url_prefix(client, approver, prefix):
    """Behind a proxy or gunicorn mounting the app under SCRIPT_NAME, request.path starts with the prefix:
    the admin is still closed to an approver without the second factor."""
    client.force_login(approver)

    response = client.get("/admin/backoffice/withdrawalapproval/", SCRIPT_NAME=prefix)

    assert response.status_code == 302
    # (the test client sets no script prefix for reverse(), as gunicorn's WSGI handler does)
    assert response.url.endswith(f"/admin/second-factor/?next={prefix}/admin/backoffice/withdrawalapproval/")
    decision = client.post(
        "/admin/backoffice/withdrawalapproval/1/decide/", {"decision": "approve"}, SCRIPT_NAME=prefix
    )
    assert decision.status_code == 302
    assert "/admin/second-factor/?next=" in decision.url


def test_an_approver_needs_the_second_factor_with_force_script_name(client, approver, settings):
    settings.FORCE_SCRIPT_NAME = "/exchange"
    client.force_login(approver)

    response = client.get("/admin/")

    assert response.status_code == 302
    assert response.url.endswith("/admin/second-factor/?next=/exchange/admin/")


def test_the_second_factor_page_itself_opens_under_a_url_prefix(client, approver):
    client.force_login(approver)
    assert client.get("/admin/second-factor/", SCRIPT_NAME="/exchange").status_code == 200


def test_enrolment_shows_a_qr_code_and_the_base32_secret(client, approver):
    import base64

    client.force_login(approver)
    page = client.get("/admin/second-factor/").content.decode()
    device = TOTPDevice.objects.get(user=approver, confirmed=False)

    qr = page.split('id="totp-qr"')[1].split("</div>")[0]
    assert "<svg " in qr and "<path " in qr
    secret = page.split('id="totp-secret"')[1].split(">")[1].split("<")[0]
    assert base64.b32decode(secret) == device.bin_key


def test_a_right_code_just_after_a_wrong_one_says_to_wait_instead_of_not_valid(client, approver, settings):
    """Regression: django-otp refuses every code for a while after a wrong one, and the page called the right
    code "not valid"."""
    settings.OTP_TOTP_THROTTLE_FACTOR = 30  # the first wait is 30 s: longer than this test, however slow
    client.force_login(approver)
    client.get("/admin/second-factor/")
    device = TOTPDevice.objects.get(user=approver)
    right = current_code(device)
    client.post("/admin/second-factor/", {"token": "000000" if right != "000000" else "111111"})

    response = client.post("/admin/second-factor/", {"token": right})
    retried = response.content.decode()

    assert response.status_code == 429
    assert "Too many wrong codes: wait " in retried and "not valid" not in retried
    wait = int(retried.split("Too many wrong codes: wait ")[1].split(" s")[0])
    assert 1 <= wait <= 30
    assert not TOTPDevice.objects.get(user=approver).confirmed
    failures = AuditLogEntry.objects.filter(actor=approver, action="second_factor.failed").order_by("id")
    assert [entry.after["reason"] for entry in failures] == ["wrong_code", "locked"]
