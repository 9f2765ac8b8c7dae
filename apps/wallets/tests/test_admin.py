"""The approval permission and the read-only back-office lists."""

import pytest
from django.contrib.auth.models import Permission

from apps.wallets.custody.simnet import new_address
from apps.wallets.services import withdrawal_request

from .factories import book_address, deposit_through_custody


def test_the_approval_permission_exists_after_migrations(db):
    permission = Permission.objects.get(content_type__app_label="wallets", codename="approve_withdrawal")

    assert permission.name == "Can approve and reject withdrawals"


@pytest.mark.parametrize("model", ["depositaddress", "deposit", "withdrawal", "withdrawaladdress", "custodyevent"])
def test_admin_lists_render_and_offer_no_changes(admin_client, usdt, user, model):
    deposit_through_custody(user, usdt, "100")
    address = book_address(user, usdt, new_address()).address
    withdrawal_request(user_id=user.id, asset_code="USDT", amount="10", address=address)

    listing = admin_client.get(f"/admin/wallets/{model}/")

    assert listing.status_code == 200
    assert admin_client.get(f"/admin/wallets/{model}/add/").status_code == 403
