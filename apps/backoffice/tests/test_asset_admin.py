"""The assets' admin screen: every creation and change of an asset's settings audited with a reason, and the
withdrawal settings the database refuses shown as field errors."""

from decimal import Decimal

import pytest
from django.urls import reverse

from apps.audit.models import AuditLogEntry
from apps.ledger.models import Asset


def asset_form(asset: Asset, **changes) -> dict:
    form = {
        "name": asset.name,
        "display_decimals": asset.display_decimals or "",
        "network": asset.network,
        "confirmations_required": asset.confirmations_required,
        "withdrawal_fee": f"{asset.withdrawal_fee.normalize():f}",
        "min_withdrawal": f"{asset.min_withdrawal.normalize():f}",
        "withdrawal_auto_approve_limit": f"{asset.withdrawal_auto_approve_limit.normalize():f}",
        "withdrawal_daily_limit": f"{asset.withdrawal_daily_limit.normalize():f}",
    }
    return {**form, **changes}


def test_a_change_of_the_withdrawal_settings_is_audited_with_its_reason(admin_client, admin_user, btc):
    """Break-it review: a superuser raised the auto-approval limit and set 0 confirmations with no reason and no
    audit row."""
    limit_before = f"{btc.withdrawal_auto_approve_limit.normalize():f}"
    form = asset_form(btc, withdrawal_auto_approve_limit="1000", confirmations_required=0, reason="  chain reorg over ")

    response = admin_client.post(f"/admin/ledger/asset/{btc.pk}/change/", form)

    assert response.status_code == 302
    changed = Asset.objects.get(pk=btc.pk)
    assert (changed.withdrawal_auto_approve_limit, changed.confirmations_required) == (1000, 0)
    (row,) = AuditLogEntry.objects.filter(action="asset.change", object_type="ledger.asset", object_id=str(btc.pk))
    assert row.actor_id == admin_user.id
    assert (row.before["withdrawal_auto_approve_limit"], row.before["confirmations_required"]) == (limit_before, 1)
    assert (row.after["withdrawal_auto_approve_limit"], row.after["confirmations_required"]) == ("1000", 0)
    assert row.after["reason"] == "chain reorg over"
    assert row.before["code"] == row.after["code"] == "BTC"


def test_a_change_without_a_reason_is_refused_on_the_form_and_changes_nothing(admin_client, btc):
    for reason in ("", "   ", "\u200b"):
        form = asset_form(btc, withdrawal_auto_approve_limit="1000", reason=reason)
        response = admin_client.post(f"/admin/ledger/asset/{btc.pk}/change/", form)

        assert response.status_code == 200
        assert response.context["adminform"].form.errors["reason"]
    assert Asset.objects.get(pk=btc.pk).withdrawal_auto_approve_limit == btc.withdrawal_auto_approve_limit
    assert not AuditLogEntry.objects.filter(object_type="ledger.asset").exists()


def test_a_new_asset_is_audited_with_its_settings(admin_client, admin_user, db):
    form = {
        "code": "SOL",
        "name": "Solana",
        "decimals": 9,
        "display_decimals": 4,
        "network": "simnet",
        "confirmations_required": 2,
        "withdrawal_fee": "0.01",
        "min_withdrawal": "0.1",
        "withdrawal_auto_approve_limit": "50",
        "withdrawal_daily_limit": "500",
        "reason": "listing approved by the committee",
    }

    response = admin_client.post("/admin/ledger/asset/add/", form)

    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else ""
    asset = Asset.objects.get(code="SOL")
    (row,) = AuditLogEntry.objects.filter(action="asset.create", object_id=str(asset.pk))
    assert (row.actor_id, row.before) == (admin_user.id, {})
    assert row.after["withdrawal_daily_limit"] == "500"
    assert row.after["confirmations_required"] == 2
    assert row.after["reason"] == "listing approved by the committee"


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("withdrawal_fee", "0.000000001", "At most 8 decimal places (BTC precision)."),
        ("min_withdrawal", "-1", "Must be zero or more."),
        ("withdrawal_auto_approve_limit", "0.123456789", "At most 8 decimal places (BTC precision)."),
        ("withdrawal_daily_limit", "-0.1", "Must be zero or more."),
    ],
)
def test_a_withdrawal_setting_the_database_refuses_is_a_field_error_not_a_500(admin_client, btc, field, value, error):
    before = getattr(btc, field)
    response = admin_client.post(
        reverse("admin:ledger_asset_change", args=[btc.id]), asset_form(btc, **{field: value}, reason="fee review")
    )

    assert response.status_code == 200  # the form again, with the error
    assert response.context["adminform"].form.errors == {field: [error]}
    btc.refresh_from_db()
    assert getattr(btc, field) == before


def test_an_exact_withdrawal_setting_is_saved(admin_client, btc):
    response = admin_client.post(
        reverse("admin:ledger_asset_change", args=[btc.id]),
        asset_form(btc, withdrawal_fee="0.00000001", reason="fee review"),
    )

    assert response.status_code == 302
    btc.refresh_from_db()
    assert btc.withdrawal_fee == Decimal("0.00000001")
