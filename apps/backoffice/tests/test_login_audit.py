"""Log-ins, failed log-ins and second-factor enrolments in the audit log; staff's second factor by setting."""

from django.test import Client
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.audit.models import AuditLogEntry
from apps.backoffice.tests.test_second_factor import current_code
from apps.ledger.tests.factories import UserFactory


def test_a_log_in_is_audited_with_the_clients_address_and_agent(db):
    user = UserFactory(username="dora")
    user.set_password("dora-secret-2026")
    user.save()

    Client(HTTP_USER_AGENT="Firefox/140", REMOTE_ADDR="203.0.113.7").post(
        "/accounts/login/", {"username": "dora", "password": "dora-secret-2026"}
    )

    row = AuditLogEntry.objects.get(action="login")
    assert (row.actor, row.object_type, row.object_id) == (user, "auth.user", str(user.id))
    assert row.after == {"ip": "203.0.113.7", "user_agent": "Firefox/140"}


def test_failed_log_ins_are_audited_for_known_and_unknown_usernames(db):
    user = UserFactory(username="dora")
    browser = Client(REMOTE_ADDR="198.51.100.9")

    browser.post("/accounts/login/", {"username": "dora", "password": "wrong"})
    browser.post("/accounts/login/", {"username": "nobody", "password": "wrong"})

    rows = list(AuditLogEntry.objects.filter(action="login_failed").order_by("id"))
    assert [(r.actor, r.object_id, r.after["username"], r.after["ip"]) for r in rows] == [
        (None, str(user.id), "dora", "198.51.100.9"),
        (None, "", "nobody", "198.51.100.9"),
    ]
    assert not AuditLogEntry.objects.filter(action="login").exists()


def test_second_factor_enrolment_is_audited_once(client, approver):
    client.force_login(approver)
    client.get("/admin/second-factor/")
    device = TOTPDevice.objects.get(user=approver)
    assert not AuditLogEntry.objects.filter(action="second_factor.enrol").exists()  # not confirmed yet

    client.post("/admin/second-factor/", {"token": current_code(device)})
    device.refresh_from_db()
    device.save()  # every verification saves the device again

    row = AuditLogEntry.objects.get(action="second_factor.enrol")
    assert (row.actor, row.object_id) == (approver, str(approver.id))
    assert row.after == {"device": device.persistent_id, "type": "TOTP device", "name": "authenticator"}


def test_every_operator_needs_the_second_factor_when_the_setting_says_so(client, operator, settings):
    client.force_login(operator)
    assert client.get("/admin/").status_code == 200  # off by default (local runs, tests)

    settings.STAFF_SECOND_FACTOR_REQUIRED = True

    response = client.get("/admin/")
    assert (response.status_code, response.url) == (302, "/admin/second-factor/?next=/admin/")


def test_traders_are_not_asked_for_the_admin_second_factor(client, user, settings):
    settings.STAFF_SECOND_FACTOR_REQUIRED = True
    client.force_login(user)
    response = client.get("/admin/")
    assert response.url.startswith("/admin/login/")


def test_the_audit_log_links_a_customers_rows_to_the_customer_screen(client, operator, db):
    customer = UserFactory(username="gus")
    Client().post("/accounts/login/", {"username": "gus", "password": "wrong"})
    client.force_login(operator)

    page = client.get("/admin/audit/auditlogentry/?action=login_failed").content.decode()

    assert f'<a href="/admin/backoffice/customer/{customer.id}/change/">auth.user {customer.id}</a>' in page


def test_a_failed_log_in_with_hidden_characters_is_shown_with_them_escaped(db, admin_client):
    """Break-it review: a failed log-in as ``op\\x1berator`` was recorded as it was but shown as ``operator``."""
    UserFactory(username="operator")
    Client(REMOTE_ADDR="198.51.100.9").post("/accounts/login/", {"username": "op\x1berator", "password": "wrong"})

    row = AuditLogEntry.objects.get(action="login_failed")
    page = admin_client.get(f"/admin/audit/auditlogentry/{row.id}/change/").content.decode()
    listing = admin_client.get("/admin/audit/auditlogentry/").content.decode()

    assert row.after["username"] == "op\x1berator"
    assert "op\\u001berator" in page and "op\\u001berator" in listing
    assert "op\x1berator" not in page + listing
