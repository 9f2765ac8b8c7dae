"""Every admin page of every registered model renders for operators (and for a superuser)."""

from decimal import Decimal

import pytest
from django.contrib import admin
from django.urls import reverse

from apps.accounts.services import api_key_create
from apps.backoffice.services import adjustment_draft, reconciliation_run
from apps.ledger.models import AccountKind
from apps.ledger.services import Leg, funds_hold, system_account, user_account
from apps.ledger.tests.factories import UserFactory, fund


@pytest.fixture
def some_of_everything(db, usdt, btc, user, operator):
    fund(user, usdt, "100")
    fund(user, btc, "1")
    funds_hold(user_id=user.id, asset=usdt, amount=Decimal("5"), idempotency_key="smoke:hold")
    equity = system_account(AccountKind.EQUITY, usdt)
    adjustment_draft(
        author_id=operator.id,
        memo="smoke",
        legs=[Leg(equity.id, Decimal("1")), Leg(user_account(user.id, usdt).id, Decimal("-1"))],
    )
    reconciliation_run()
    api_key_create(user_id=user.id, name="smoke", scopes=["read"])


def admin_pages():
    for model, model_admin in admin.site._registry.items():
        yield model, model_admin, reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


@pytest.mark.parametrize("who", ["superuser", "operator", "approver"])
def test_every_admin_page_renders(client, some_of_everything, operator, approver, who, admin_login):
    viewer = {
        "operator": operator,
        "approver": approver,
        "superuser": UserFactory(username="root", is_staff=True, is_superuser=True),
    }[who]
    admin_login(viewer)
    assert client.get(reverse("admin:index")).status_code == 200
    checked = 0
    for model, _model_admin, changelist in admin_pages():
        request_user_can_view = viewer.has_perm(f"{model._meta.app_label}.view_{model._meta.model_name}")
        response = client.get(changelist)
        if not request_user_can_view:
            assert response.status_code == 403, changelist
            continue
        assert response.status_code == 200, changelist
        checked += 1
        first = model._default_manager.first()
        if first is not None:
            change = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[first.pk])
            assert client.get(change).status_code == 200, change
        add = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_add")
        assert client.get(add).status_code in (200, 403), add
    assert checked >= 5


def test_no_money_model_can_be_deleted_from_the_admin(rf, db):
    superuser = UserFactory(is_staff=True, is_superuser=True)
    request = rf.get("/")
    request.user = superuser
    money_models = {
        "ledger.asset",
        "ledger.account",
        "ledger.journalentry",
        "ledger.posting",
        "orders.market",
        "orders.order",
        "orders.trade",
        "wallets.deposit",
        "wallets.withdrawal",
        "wallets.custodyevent",
        "wallets.depositaddress",
        "backoffice.adjustment",
        "backoffice.reconciliationrun",
        "audit.auditlogentry",
        "backoffice.withdrawalapproval",
    }
    registered = {model._meta.label_lower: model_admin for model, model_admin in admin.site._registry.items()}
    assert money_models <= registered.keys()
    for label in money_models:
        assert not registered[label].has_delete_permission(request), label
