"""Back office: the assets' form refuses the withdrawal settings the database refuses, as field errors."""

from decimal import Decimal

import pytest
from django.urls import reverse

from apps.ledger.models import WITHDRAWAL_AMOUNT_FIELDS, Asset


def asset_form(asset: Asset, **overrides) -> dict:
    fields = ("name", "network", "confirmations_required", *WITHDRAWAL_AMOUNT_FIELDS)
    return {**{name: getattr(asset, name) for name in fields}, "display_decimals": "", **overrides}


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
    response = admin_client.post(reverse("admin:ledger_asset_change", args=[btc.id]), asset_form(btc, **{field: value}))

    assert response.status_code == 200  # the form again, with the error
    assert response.context["adminform"].form.errors == {field: [error]}
    btc.refresh_from_db()
    assert getattr(btc, field) == before


def test_an_exact_withdrawal_setting_is_saved(admin_client, btc):
    response = admin_client.post(
        reverse("admin:ledger_asset_change", args=[btc.id]), asset_form(btc, withdrawal_fee="0.00000001")
    )

    assert response.status_code == 302
    btc.refresh_from_db()
    assert btc.withdrawal_fee == Decimal("0.00000001")
