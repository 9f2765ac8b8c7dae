"""Deposit addresses and per-network address validation."""

import threading

import pytest
from django.db import connection

from apps.core.addresses import address_validate
from apps.core.errors import InvalidAddress
from apps.ledger.tests.factories import UserFactory
from apps.wallets.custody import simnet
from apps.wallets.custody.simulator.models import SimAddress
from apps.wallets.models import DepositAddress
from apps.wallets.services import deposit_address_get_or_create


def test_new_simnet_addresses_are_valid_and_distinct():
    addresses = {simnet.new_address() for _ in range(100)}

    assert len(addresses) == 100
    assert all(simnet.is_valid(address) and len(address) == 44 for address in addresses)


@pytest.mark.parametrize("position", range(4, 44))
def test_any_single_character_typo_breaks_a_simnet_address(position):
    address = simnet.new_address()
    replacement = "0" if address[position] != "0" else "1"

    assert not simnet.is_valid(address[:position] + replacement + address[position + 1 :])


def test_address_validate_uses_the_networks_validator(settings):
    address = simnet.new_address()

    assert address_validate(network="simnet", address=address) == address
    with pytest.raises(InvalidAddress):
        address_validate(network="bitcoin", address=address)
    settings.WALLETS_ADDRESS_VALIDATORS = {**settings.WALLETS_ADDRESS_VALIDATORS, "bitcoin": "builtins.len"}
    assert address_validate(network="bitcoin", address=address) == address  # any callable that does not raise


def test_deposit_address_is_handed_out_by_custody_once_per_user_and_asset(btc, usdt, user):
    first = deposit_address_get_or_create(user_id=user.id, asset=btc)

    assert deposit_address_get_or_create(user_id=user.id, asset=btc) == first
    other_asset = deposit_address_get_or_create(user_id=user.id, asset=usdt)
    other_user = deposit_address_get_or_create(user_id=UserFactory().id, asset=btc)
    assert len({first.address, other_asset.address, other_user.address}) == 3
    assert simnet.is_valid(first.address)
    assert SimAddress.objects.get(address=first.address).label == f"user:{user.id}"
    assert DepositAddress.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_concurrent_first_requests_ask_custody_for_one_address(btc, user):
    """Break-it review: 20 concurrent first requests all got one address, but custody had handed out 10 more that
    nobody kept (a real provider may charge for each)."""
    barrier = threading.Barrier(12)
    found: list[str] = []

    def first_request() -> None:
        try:
            barrier.wait(timeout=30)
            found.append(deposit_address_get_or_create(user_id=user.id, asset=btc).address)
        finally:
            connection.close()

    threads = [threading.Thread(target=first_request) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(found) == 12 and len(set(found)) == 1
    assert list(SimAddress.objects.values_list("address", flat=True)) == [found[0]]
    assert DepositAddress.objects.get(user=user, asset=btc).address == found[0]
