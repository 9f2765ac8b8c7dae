"""The simulated custody provider behaves like a provider: its own books, idempotent submissions, retries."""

import socket
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.wallets.custody import get_adapter, signing
from apps.wallets.custody.base import CallbackUnauthenticated, CustodyRejected, CustodyUnavailable
from apps.wallets.custody.simnet import new_address
from apps.wallets.custody.simulator.models import SimCallback, SimDeposit, SimWallet, SimWithdrawal
from apps.wallets.custody.simulator.provider import SimulatedCustody

from .factories import webhook_sender


@pytest.fixture
def custody(db) -> SimulatedCustody:
    return SimulatedCustody()


@pytest.fixture
def funded(custody) -> str:
    """A provider address that received 10 BTC (confirmed: the callbacks went out)."""
    address = custody.new_deposit_address(network="simnet", asset_code="BTC", label="user:1")
    custody.deposit_receive(address=address, amount=Decimal(10), confirmations=1, delay=0)
    deliveries = custody.callbacks_deliver_due(send=lambda body, headers: 200)
    assert [delivery.delivered for delivery in deliveries] == [True, True]
    return address


def test_it_is_the_default_adapter():
    assert isinstance(get_adapter(), SimulatedCustody)


def test_deposit_counts_in_the_wallet_from_its_first_callback_and_once(custody):
    """The provider holds the coins once it reports them (the exchange may credit them before custody calls them
    confirmed: reconciliation's invariant 5 counts them in flight until then)."""
    address = custody.new_deposit_address(network="simnet", asset_code="BTC", label="user:1")
    custody.deposit_receive(address=address, amount=Decimal(2), txid="abc", confirmations=2, delay=0)
    sent = []

    def send(body, headers):
        sent.append(body)
        return 200

    assert custody.holdings() == {}  # on chain, not reported yet
    first = list(SimCallback.objects.order_by("id").values_list("pk", flat=True)[:1])
    custody.callbacks_deliver_due(callback_ids=first, send=send)
    assert custody.holdings() == {"BTC": Decimal(2)}  # 0 confirmations, reported: counted
    custody.callbacks_deliver_due(send=send)

    assert custody.holdings() == {"BTC": Decimal(2)}  # and only once
    assert [b'"status":"pending"' in body for body in sent] == [True, True, False]
    assert SimDeposit.objects.get().confirmations == 2


def test_deposits_reach_only_the_providers_own_addresses(custody):
    with pytest.raises(ValueError):
        custody.deposit_receive(address=new_address(), amount=Decimal(1))


def test_callbacks_are_signed_as_the_webhook_expects(custody, settings):
    address = custody.new_deposit_address(network="simnet", asset_code="BTC", label="")
    custody.deposit_receive(address=address, amount=Decimal(1), confirmations=0, delay=0)
    received = []

    custody.callbacks_deliver_due(send=lambda body, headers: received.append((body, headers)) or 200)

    body, headers = received[0]
    signing.verify(secret=settings.CUSTODY_WEBHOOK_SECRET, headers=headers, body=body, max_skew=5)
    with pytest.raises(CallbackUnauthenticated):
        signing.verify(secret="other", headers=headers, body=body, max_skew=5)


def test_an_undelivered_callback_is_retried_later_with_backoff(custody):
    address = custody.new_deposit_address(network="simnet", asset_code="BTC", label="")
    custody.deposit_receive(address=address, amount=Decimal(1), confirmations=0, delay=0)

    first = custody.callbacks_deliver_due(send=lambda body, headers: 503)

    callback = SimCallback.objects.get()
    assert [delivery.status for delivery in first] == [503]
    assert (callback.delivered_at, callback.attempts, callback.last_error) == (None, 1, "HTTP 503")
    assert callback.due_at > timezone.now()
    assert custody.callbacks_deliver_due(send=lambda body, headers: 200) == []  # not due yet
    SimCallback.objects.update(due_at=timezone.now() - timedelta(seconds=1))
    assert [d.delivered for d in custody.callbacks_deliver_due(send=lambda body, headers: 200)] == [True]
    assert SimWallet.objects.get().balance == Decimal(1)  # applied once, on the first attempt


def test_a_webhook_that_does_not_answer_ends_the_round_and_the_rest_wait_untried(custody, settings):
    address = custody.new_deposit_address(network="simnet", asset_code="BTC", label="")
    custody.deposit_receive(address=address, amount=Decimal(1), confirmations=2, delay=0)  # three callbacks due
    with socket.socket() as closed:  # bound, never listening: a connection to it is refused
        closed.bind(("127.0.0.1", 0))
        settings.CUSTODY_CALLBACK_URL = f"http://127.0.0.1:{closed.getsockname()[1]}/custody/callbacks/"

        deliveries = custody.callbacks_deliver_due()

    assert [(d.status, "refused" in d.error) for d in deliveries] == [(None, True)]
    assert sorted(SimCallback.objects.values_list("attempts", flat=True)) == [0, 0, 1]
    assert [d.delivered for d in custody.callbacks_deliver_due(send=lambda body, headers: 200)] == [True, True]


def test_submission_is_idempotent_on_the_withdrawal_id(custody, funded):
    destination = new_address()
    first = custody.submit_withdrawal(
        withdrawal_id="7", network="simnet", asset_code="BTC", amount=Decimal(1), address=destination
    )
    second = custody.submit_withdrawal(
        withdrawal_id="7", network="simnet", asset_code="BTC", amount=Decimal(1), address=destination
    )

    assert first == second
    assert SimWithdrawal.objects.get().requests == 2
    assert custody.holdings() == {"BTC": Decimal("8.99999")}  # 10 - 1 - network fee 0.00001
    status = custody.withdrawal_status(withdrawal_id="7")
    assert (status.status, status.amount, status.network_fee, status.requests) == (
        "accepted",
        Decimal(1),
        Decimal("0.00001"),
        2,
    )
    assert custody.withdrawal_status(withdrawal_id="8") is None


def test_submission_above_the_holdings_is_refused(custody, funded):
    with pytest.raises(CustodyRejected):
        custody.submit_withdrawal(
            withdrawal_id="9", network="simnet", asset_code="BTC", amount=Decimal(10), address=new_address()
        )

    assert not SimWithdrawal.objects.exists()
    assert custody.holdings() == {"BTC": Decimal(10)}


def test_submission_to_a_malformed_address_or_another_network_is_refused(custody, funded):
    for network, address in [("simnet", "sim1nope"), ("bitcoin", new_address())]:
        with pytest.raises(CustodyRejected):
            custody.submit_withdrawal(
                withdrawal_id="10", network=network, asset_code="BTC", amount=Decimal(1), address=address
            )


def test_scripted_timeout_accepts_the_withdrawal_but_gives_no_answer_once(custody, funded):
    destination = new_address()
    custody.fault_add(operation="submit", kind="timeout", address=destination)

    with pytest.raises(CustodyUnavailable):
        custody.submit_withdrawal(
            withdrawal_id="11", network="simnet", asset_code="BTC", amount=Decimal(1), address=destination
        )
    assert SimWithdrawal.objects.get().client_reference == "11"

    receipt = custody.submit_withdrawal(
        withdrawal_id="11", network="simnet", asset_code="BTC", amount=Decimal(1), address=destination
    )
    assert receipt.status == "accepted"
    assert SimWithdrawal.objects.get().requests == 2


def test_failure_rate_one_fails_every_withdrawal_and_returns_the_coins(custody, funded, settings):
    settings.CUSTODY_SIMULATOR_FAILURE_RATE = 1.0
    custody.submit_withdrawal(
        withdrawal_id="12", network="simnet", asset_code="BTC", amount=Decimal(1), address=new_address()
    )

    custody.callbacks_deliver_due(send=lambda body, headers: 200)

    assert SimWithdrawal.objects.get().status == "failed"
    assert custody.holdings() == {"BTC": Decimal(10)}


def test_withdrawal_outcome_callback_reaches_the_webhook(custody, funded, btc):
    """A callback for a withdrawal the exchange does not know is refused by the webhook: it is retried later."""
    custody.submit_withdrawal(
        withdrawal_id="999999", network="simnet", asset_code="BTC", amount=Decimal(1), address=new_address()
    )

    deliveries = custody.callbacks_deliver_due(send=webhook_sender())

    assert [delivery.status for delivery in deliveries] == [400]
    assert SimCallback.objects.filter(delivered_at__isnull=True).count() == 1
