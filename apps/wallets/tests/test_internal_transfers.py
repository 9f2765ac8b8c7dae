"""Withdrawals to our own deposit addresses (hole 4): another asset's is refused, the same asset's settles as
an internal transfer; a custody report crediting an address in another asset is rejected for an operator."""

import threading
from decimal import Decimal

import pytest
from django.db import IntegrityError, connections

from apps.core.errors import InvalidAddress
from apps.ledger.models import AccountKind, JournalEntry
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import system_account, user_accounts
from apps.ledger.tests.factories import UserFactory
from apps.wallets import tasks
from apps.wallets.custody.base import CustodyRejected
from apps.wallets.custody.simulator.models import SimCallback, SimWithdrawal
from apps.wallets.custody.simulator.provider import SimulatedCustody
from apps.wallets.models import CustodyEvent, Deposit, DepositStatus, EventState, WithdrawalStatus
from apps.wallets.services import (
    custody_event_process,
    custody_event_receive,
    deposit_address_get_or_create,
    withdrawal_approve,
    withdrawal_request,
    withdrawal_submit,
)

from .conftest import make_operator
from .factories import book_address, deposit_payload, deposit_through_custody, signed


def balances(user, asset) -> tuple[Decimal, Decimal]:
    available, held = user_accounts(user.id, asset)
    return available.balance, held.balance


def test_a_withdrawal_to_our_deposit_address_of_another_asset_is_refused(btc, usdt, user):
    """The issue's case: 0.2 BTC withdrawn to a USDT address arrived as 0.2 USDT."""
    deposit_through_custody(user, btc, "1")
    usdt_address = deposit_address_get_or_create(user_id=UserFactory().id, asset=usdt).address

    with pytest.raises(InvalidAddress) as refused:
        withdrawal_request(user_id=user.id, asset_code="BTC", amount="0.2", address=usdt_address)

    assert refused.value.code == "invalid_address"
    assert refused.value.fields == {"address": refused.value.message}
    assert "for USDT" in refused.value.message
    assert balances(user, btc) == (Decimal(1), Decimal(0))
    assert reconcile().ok


def test_a_withdrawal_to_another_users_deposit_address_settles_internally(usdt, user, settings):
    settings.CUSTODY_SIMULATOR_NETWORK_FEES = {"USDT": "0.5"}
    usdt.withdrawal_fee = Decimal("1")
    usdt.save(update_fields=["withdrawal_fee"])
    deposit_through_custody(user, usdt, "100")
    friend = UserFactory()
    address = deposit_address_get_or_create(user_id=friend.id, asset=usdt)
    custody_before = system_account(AccountKind.CUSTODY, usdt).balance
    book_address(user, usdt, address.address)
    withdrawal = withdrawal_request(user_id=user.id, asset_code="USDT", amount="40", address=address.address)

    settled = withdrawal_submit(withdrawal_id=withdrawal.pk)

    assert settled.status == WithdrawalStatus.COMPLETED
    assert settled.txid == f"internal-{withdrawal.pk}"
    assert settled.network_fee == Decimal(0)
    assert not SimWithdrawal.objects.exists()  # no custody call, no network fee
    assert balances(user, usdt) == (Decimal(59), Decimal(0))  # 40 and the exchange's fee of 1
    assert balances(friend, usdt) == (Decimal(40), Decimal(0))
    deposit = Deposit.objects.get(user=friend)
    assert (deposit.status, deposit.amount, deposit.txid, deposit.address_id) == (
        DepositStatus.CREDITED,
        Decimal(40),
        settled.txid,
        address.id,
    )
    assert system_account(AccountKind.CUSTODY, usdt).balance == custody_before
    assert set(
        JournalEntry.objects.filter(idempotency_key__contains=f"internal-{withdrawal.pk}").values_list(
            "idempotency_key", flat=True
        )
    ) == {f"deposit:simnet:internal-{withdrawal.pk}:0"}
    assert reconcile().ok


def test_a_submission_failing_on_an_error_of_ours_says_so_to_operators_and_keeps_the_hold(usdt, user):
    """Break-it review: a deposit reported as ``internal-<id>`` (refused since, test_webhook.py) took the id the
    internal settlement of withdrawal <id> needed; its task failed with an IntegrityError at every retry and the back
    office showed no error. The withdrawal stays approved with its hold, and ``last_error`` says what failed."""
    deposit_through_custody(user, usdt, "100")
    friend = UserFactory()
    address = deposit_address_get_or_create(user_id=friend.id, asset=usdt)
    book_address(user, usdt, address.address)
    withdrawal = withdrawal_request(user_id=user.id, asset_code="USDT", amount="40", address=address.address)
    Deposit.objects.create(  # as stored before reported "internal-" ids were refused
        user=friend, asset=usdt, address=address, network=usdt.network, txid=f"internal-{withdrawal.pk}", vout=0,
        amount=Decimal(1), confirmations=0,
    )  # fmt: skip

    with pytest.raises(IntegrityError):
        tasks.withdrawal_submit(withdrawal.pk)

    withdrawal.refresh_from_db()
    assert withdrawal.status == WithdrawalStatus.APPROVED
    assert withdrawal.last_error.startswith("Internal error: IntegrityError: duplicate key value violates unique")
    assert balances(user, usdt) == (Decimal(60), Decimal(40))


def test_an_internal_transfer_waits_for_approval_like_any_withdrawal(usdt, user):
    deposit_through_custody(user, usdt, "5000")
    friend = UserFactory()
    address = deposit_address_get_or_create(user_id=friend.id, asset=usdt).address
    book_address(user, usdt, address)
    withdrawal = withdrawal_request(user_id=user.id, asset_code="USDT", amount="2000", address=address)
    assert withdrawal.status == WithdrawalStatus.AWAITING_APPROVAL

    assert withdrawal_submit(withdrawal_id=withdrawal.pk).status == WithdrawalStatus.AWAITING_APPROVAL
    assert balances(friend, usdt) == (Decimal(0), Decimal(0))

    withdrawal_approve(withdrawal_id=withdrawal.pk, operator_id=make_operator().id)
    assert withdrawal_submit(withdrawal_id=withdrawal.pk).status == WithdrawalStatus.COMPLETED
    assert balances(friend, usdt) == (Decimal(2000), Decimal(0))
    assert reconcile().ok


@pytest.mark.django_db(transaction=True)
def test_concurrent_submissions_settle_an_internal_transfer_exactly_once(usdt, user):
    deposit_through_custody(user, usdt, "100")
    friend = UserFactory()
    address = deposit_address_get_or_create(user_id=friend.id, asset=usdt).address
    book_address(user, usdt, address)
    withdrawal = withdrawal_request(user_id=user.id, asset_code="USDT", amount="30", address=address)
    start = threading.Barrier(4)
    errors = []

    def submit():
        try:
            start.wait()
            withdrawal_submit(withdrawal_id=withdrawal.pk)
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert Deposit.objects.filter(user=friend).count() == 1
    assert balances(friend, usdt) == (Decimal(30), Decimal(0))
    assert balances(user, usdt) == (Decimal(70), Decimal(0))
    assert reconcile().ok


def test_a_deposit_report_in_another_asset_than_its_address_is_rejected_for_an_operator(btc, usdt, user):
    usdt_address = deposit_address_get_or_create(user_id=user.id, asset=usdt).address
    event, _ = custody_event_receive(body=signed(deposit_payload(usdt_address, "0.2", asset="BTC", txid="mix"))[0])

    processed = custody_event_process(event_pk=event.pk)

    assert processed.state == EventState.REJECTED
    assert "deposit address for USDT" in processed.error
    assert not Deposit.objects.exists()
    assert balances(user, usdt) == (Decimal(0), Decimal(0))
    assert balances(user, btc) == (Decimal(0), Decimal(0))
    assert CustodyEvent.objects.get(pk=event.pk).state == EventState.REJECTED
    assert reconcile().ok


def test_the_simulated_custody_refuses_to_send_an_asset_to_an_address_of_another(btc, usdt, user):
    deposit_through_custody(user, btc, "1")
    usdt_address = deposit_address_get_or_create(user_id=UserFactory().id, asset=usdt).address

    with pytest.raises(CustodyRejected) as refused:
        SimulatedCustody().submit_withdrawal(
            withdrawal_id="x-1", network="simnet", asset_code="BTC", amount=Decimal("0.2"), address=usdt_address
        )

    assert "is a USDT address" in str(refused.value)
    assert not SimWithdrawal.objects.exists()
    assert not SimCallback.objects.filter(withdrawal__isnull=False).exists()
