"""factory_boy factories for ledger tests (and the other apps' tests)."""

from decimal import Decimal

import factory
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from apps.ledger.models import AccountKind, Asset
from apps.ledger.services import adjustment_post, credit, debit, system_account, user_account

PASSWORD = "correct horse battery staple"
"""Every factory user's password."""


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda user: f"{user.username}@example.com")
    password = factory.django.Password(PASSWORD)


class AssetFactory(factory.django.DjangoModelFactory[Asset]):
    """Defaults to USDT (6 decimals); pass ``code``/``decimals`` for others."""

    class Meta:
        model = Asset
        django_get_or_create = ("code",)

    code = "USDT"
    name = factory.LazyAttribute(lambda asset: asset.code)
    decimals = 6


FUNDING_MAKER = "funding-maker"
FUNDING_CHECKER = "funding-checker"
"""The operators who draft and approve every test funding (their own users, holding nothing)."""


def fund(user, asset: Asset, amount: Decimal | str) -> None:
    """Credit ``amount`` to the user's available funds from ``equity`` (Dr equity, Cr available): a manual
    adjustment, recorded as approved and posted as ``apps.backoffice.services.adjustment_approve`` does (by
    :func:`~apps.ledger.services.adjustment_post`, the adjustment naming its entry), so reconciliation finds
    the record that backs it (invariant 8) without the back office's permissions and second factor. The ledger's
    packages import no other app (pyproject.toml's import contracts), so the record's model is looked up by name.

    Owner capital, not a deposit: custody is untouched, so the custody check (invariant 5)
    still agrees with the custody provider. Tests of deposits go through apps.wallets.
    """
    amount = Decimal(amount)
    maker = UserFactory.create(username=FUNDING_MAKER)
    checker = UserFactory.create(username=FUNDING_CHECKER)
    legs = [debit(system_account(AccountKind.EQUITY, asset), amount), credit(user_account(user.id, asset), amount)]
    memo = f"Test funding of {user.get_username()}"
    adjustments = apps.get_model("backoffice", "Adjustment").objects
    with transaction.atomic():
        adjustment = adjustments.create(
            memo=memo,
            legs=[{"account": leg.account_id, "amount": str(leg.amount)} for leg in legs],
            created_by=maker,
        )
        entry = adjustment_post(adjustment_id=str(adjustment.id), legs=legs, memo=memo, operator_id=checker.id)
        adjustments.filter(id=adjustment.id).update(
            status="approved", decided_by=checker, decided_at=timezone.now(), entry=entry
        )
