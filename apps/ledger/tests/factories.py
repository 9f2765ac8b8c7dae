"""factory_boy factories for ledger tests (and the other apps' tests)."""

import uuid
from decimal import Decimal

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction

from apps.ledger.models import AccountKind, Asset, EntryReason
from apps.ledger.services import credit, debit, entry_post, system_account, user_account

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


def fund(user, asset: Asset, amount: Decimal | str) -> None:
    """Credit ``amount`` to the user's available funds from ``equity`` (Dr equity, Cr available).

    Owner capital, not a deposit: custody is untouched, so the custody check (invariant 5)
    still agrees with the custody provider. Tests of deposits go through apps.wallets.
    """
    amount = Decimal(amount)
    with transaction.atomic():
        entry_post(
            idempotency_key=f"test-funding:{uuid.uuid4()}",
            reason=EntryReason.ADJUSTMENT,
            legs=[
                debit(system_account(AccountKind.EQUITY, asset), amount),
                credit(user_account(user.id, asset), amount),
            ],
        )
