"""The simulated custody provider, as a :class:`~apps.wallets.custody.base.CustodyAdapter`.

What it simulates (settings ``CUSTODY_SIMULATOR_*``):

- deposits: :meth:`SimulatedCustody.deposit_receive` puts coins on chain at one of its
  addresses and queues callbacks with 0, 1, ... N confirmations (``CONFIRMATIONS``), one every
  ``DELAY`` seconds, the last one ``confirmed``; the deposit counts in its wallet from its first callback (the
  provider holds the coins once it reports them; the exchange credits at the asset's confirmations);
- withdrawals: accepted once per withdrawal id (the amount and its network fee leave the
  wallet), then completed, or failed with probability ``FAILURE_RATE`` (the coins come back),
  reported by a callback ``DELAY`` seconds later;
- scripted faults (:meth:`SimulatedCustody.fault_add`): a submission that times out after the
  provider accepted it, one that gets no answer at all, a refusal, a withdrawal that fails;
- callbacks signed as API.md says, POSTed to ``CUSTODY_CALLBACK_URL``, retried with back-off
  until the webhook answers 2xx.

It never reads the exchange's ledger.
"""

import json
import logging
import random
import secrets
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import requests
from celery import current_app
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from .. import signing, simnet
from ..base import CustodyAdapter, CustodyRejected, CustodyUnavailable, CustodyWithdrawal, SubmitReceipt
from .models import SimAddress, SimCallback, SimDeposit, SimFault, SimWallet, SimWithdrawal

# The provider's books are NUMERIC(38, 18) like ours: holdings stay below 10^20.
MAX_HOLDING = Decimal(10) ** 20

log = logging.getLogger(__name__)

NETWORK = "simnet"
# While one deliverer sends a callback, others leave it alone for this long (seconds beyond the HTTP timeout).
DELIVERY_LEASE = 5
# Back-off between delivery attempts of one callback: 1, 2, 4, ... seconds, at most this.
DELIVERY_BACKOFF_MAX = 300

# The task that delivers one callback (queued by name: its module imports this one).
CALLBACK_DELIVER_TASK = "apps.wallets.custody.simulator.tasks.callback_deliver"

# ``send(body, headers) -> HTTP status`` delivers one signed callback; the default POSTs it.
Sender = Callable[[bytes, Mapping[str, str]], int]


@dataclass(frozen=True)
class Delivery:
    """One delivery attempt of a callback: the HTTP ``status`` (``None`` if no answer) and any ``error``."""

    event_id: str
    status: int | None
    error: str = ""

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def _amount_text(amount: Decimal) -> str:
    return f"{amount.normalize():f}" if amount else "0"


def _network_fee(asset_code: str) -> Decimal:
    return Decimal(str(settings.CUSTODY_SIMULATOR_NETWORK_FEES.get(asset_code, "0")))


def _wallet_locked(asset_code: str) -> SimWallet:
    SimWallet.objects.get_or_create(asset_code=asset_code)
    return SimWallet.objects.select_for_update(no_key=True).get(asset_code=asset_code)


def _fault_take(operation: str, address: str) -> str | None:
    """Consume one matching scripted fault; return its kind."""
    with transaction.atomic():
        fault = (
            SimFault.objects.select_for_update(no_key=True, skip_locked=True)
            .filter(operation=operation, address=address, remaining__gt=0)
            .order_by("id")
            .first()
        )
        if fault is None:
            return None
        SimFault.objects.filter(pk=fault.pk).update(remaining=F("remaining") - 1)
        return fault.kind


def _receipt(withdrawal: SimWithdrawal) -> SubmitReceipt:
    return SubmitReceipt(reference=f"sim-{withdrawal.pk}", status=withdrawal.status)


class SimulatedCustody(CustodyAdapter):
    """The default custody adapter: a provider simulated in its own tables (see the module docstring)."""

    # The adapter interface ---------------------------------------------------------------------

    def new_deposit_address(self, *, network: str, asset_code: str, label: str) -> str:
        """A fresh simnet address, remembered as the provider's own. Raises :class:`CustodyRejected` off simnet."""
        if network != NETWORK:
            raise CustodyRejected(f"The simulated provider runs {NETWORK} only, not {network}.")
        address = SimAddress.objects.create(
            network=network, address=simnet.new_address(), asset_code=asset_code, label=label[:200]
        )
        return address.address

    def submit_withdrawal(
        self, *, withdrawal_id: str, network: str, asset_code: str, amount: Decimal, address: str
    ) -> SubmitReceipt:
        """Accept a withdrawal once per ``withdrawal_id`` (the amount and network fee leave the wallet).

        A repeated id returns the first receipt and only counts the request. Raises
        :class:`CustodyRejected` for another network, a bad address, an address it handed out
        for another asset (a chain refuses to send X to an address of Y), or a wallet short of
        ``amount`` plus the network fee; scripted faults raise :class:`CustodyUnavailable`.
        """
        fault = _fault_take("submit", address)
        if fault == "unavailable":
            raise CustodyUnavailable("Simulated custody: no answer (the request never arrived).")
        if fault == "reject":
            raise CustodyRejected("Simulated custody: withdrawal refused.")
        if network != NETWORK:
            raise CustodyRejected(f"The simulated provider runs {NETWORK} only, not {network}.")
        if not simnet.is_valid(address):
            raise CustodyRejected("Simulated custody: not a simnet address.")
        own = SimAddress.objects.filter(address=address).values_list("asset_code", flat=True).first()
        if own is not None and own != asset_code:
            raise CustodyRejected(f"Simulated custody: {address} is a {own} address; it cannot receive {asset_code}.")
        with transaction.atomic():
            wallet = _wallet_locked(asset_code)  # serialises submissions per asset
            withdrawal = SimWithdrawal.objects.filter(client_reference=withdrawal_id).first()
            if withdrawal is not None:
                SimWithdrawal.objects.filter(pk=withdrawal.pk).update(requests=F("requests") + 1)
            else:
                withdrawal = self._accept(wallet, withdrawal_id, asset_code, amount, address)
        if fault == "timeout":
            raise CustodyUnavailable("Simulated custody: timed out waiting for the answer.")
        return _receipt(withdrawal)

    def _accept(self, wallet: SimWallet, withdrawal_id: str, asset_code: str, amount: Decimal, address: str):
        fee = _network_fee(asset_code)
        if wallet.balance < amount + fee:
            raise CustodyRejected(
                f"Simulated custody holds {_amount_text(wallet.balance)} {asset_code}, "
                f"{_amount_text(amount + fee)} needed."
            )
        SimWallet.objects.filter(pk=wallet.pk).update(balance=F("balance") - amount - fee)
        withdrawal = SimWithdrawal.objects.create(
            client_reference=withdrawal_id,
            network=NETWORK,
            asset_code=asset_code,
            address=address,
            amount=amount,
            network_fee=fee,
            txid=secrets.token_hex(32),
        )
        fails = _fault_take("outcome", address) == "fail" or random.random() < settings.CUSTODY_SIMULATOR_FAILURE_RATE
        delay = settings.CUSTODY_SIMULATOR_DELAY
        callback = SimCallback.objects.create(
            event_id=uuid.uuid4().hex,
            withdrawal=withdrawal,
            due_at=timezone.now() + timedelta(seconds=delay),
            payload={
                "type": "withdrawal",
                "withdrawal_id": withdrawal_id,
                "asset": asset_code,
                "amount": _amount_text(amount),
                "address": address,
                "txid": withdrawal.txid,
                "status": "failed" if fails else "completed",
                "network_fee": _amount_text(Decimal(0) if fails else fee),
            },
        )
        transaction.on_commit(lambda: _schedule_delivery(callback.pk, delay), robust=True)
        return withdrawal

    def withdrawal_status(self, *, withdrawal_id: str) -> CustodyWithdrawal | None:
        """The provider's record of the withdrawal, ``None`` if it never accepted it."""
        withdrawal = SimWithdrawal.objects.filter(client_reference=withdrawal_id).first()
        if withdrawal is None:
            return None
        return CustodyWithdrawal(
            withdrawal_id=withdrawal.client_reference,
            reference=f"sim-{withdrawal.pk}",
            asset_code=withdrawal.asset_code,
            amount=withdrawal.amount,
            address=withdrawal.address,
            status=withdrawal.status,
            txid=withdrawal.txid,
            network_fee=withdrawal.network_fee,
            requests=withdrawal.requests,
        )

    def holdings(self) -> dict[str, Decimal]:
        """The provider's wallet balances ``{asset code: amount}``."""
        return {wallet.asset_code: wallet.balance for wallet in SimWallet.objects.all()}

    def verify_callback(self, *, headers: Mapping[str, str], body: bytes) -> None:
        """HMAC-SHA256 with ``CUSTODY_WEBHOOK_SECRET`` and at most ``CUSTODY_WEBHOOK_MAX_SKEW`` seconds of skew."""
        signing.verify(
            secret=settings.CUSTODY_WEBHOOK_SECRET,
            headers=headers,
            body=body,
            max_skew=settings.CUSTODY_WEBHOOK_MAX_SKEW,
        )

    # Driving the simulation ---------------------------------------------------------------------

    def deposit_receive(
        self,
        *,
        address: str,
        amount: Decimal,
        txid: str | None = None,
        vout: int = 0,
        confirmations: int | None = None,
        delay: float | None = None,
    ) -> SimDeposit:
        """Coins arrive on chain at ``address`` (one of the provider's); queue the callbacks that report them.

        ``amount`` is in units of the address's asset. Callbacks report 0 to ``confirmations``
        (default ``CUSTODY_SIMULATOR_CONFIRMATIONS``) confirmations, ``delay`` seconds apart
        (default ``CUSTODY_SIMULATOR_DELAY``), the last one ``confirmed``. Deliver them with
        :meth:`callbacks_deliver_due`. Raises ``ValueError`` for an address the provider never
        issued, a non-positive amount or an output (txid, vout) already received.
        """
        known = SimAddress.objects.filter(address=address).first()
        if known is None:
            raise ValueError(f"{address} is not an address of the simulated custody.")
        if not amount > 0:
            raise ValueError("A deposit amount must be positive.")
        wallet = SimWallet.objects.filter(asset_code=known.asset_code).first()
        if (wallet.balance if wallet else 0) + amount >= MAX_HOLDING:
            raise ValueError("The custody's holdings of this asset would reach 10^20: too large a deposit.")
        confirmations = settings.CUSTODY_SIMULATOR_CONFIRMATIONS if confirmations is None else confirmations
        delay = settings.CUSTODY_SIMULATOR_DELAY if delay is None else delay
        now = timezone.now()
        try:
            with transaction.atomic():
                deposit = SimDeposit.objects.create(
                    network=known.network,
                    asset_code=known.asset_code,
                    address=address,
                    txid=txid or secrets.token_hex(32),
                    vout=vout,
                    amount=amount,
                )
                SimCallback.objects.bulk_create(
                    SimCallback(
                        event_id=uuid.uuid4().hex,
                        deposit=deposit,
                        due_at=now + timedelta(seconds=delay * count),
                        payload={
                            "type": "deposit",
                            "asset": known.asset_code,
                            "address": address,
                            "amount": _amount_text(amount),
                            "txid": deposit.txid,
                            "vout": vout,
                            "confirmations": count,
                            "status": "confirmed" if count == confirmations else "pending",
                        },
                    )
                    for count in range(confirmations + 1)
                )
        except IntegrityError:
            raise ValueError(f"Output {txid}:{vout} was already received.") from None
        return deposit

    def fault_add(self, *, operation: str, kind: str, address: str, times: int = 1) -> None:
        """Script a misbehaviour for the next ``times`` calls about ``address`` (see :class:`SimFault`)."""
        SimFault.objects.create(operation=operation, kind=kind, address=address, remaining=times)

    def callbacks_deliver_due(
        self, *, callback_ids: list[int] | None = None, send: Sender | None = None, limit: int = 1000
    ) -> list[Delivery]:
        """Send every callback that is due (optionally only those in ``callback_ids``), oldest first.

        Each is first applied to the provider's books (once), then signed and sent with
        ``send`` (default: HTTP POST to ``CUSTODY_CALLBACK_URL``). An undelivered callback is
        retried later with back-off. A delivery that got no answer at all (connection refused, timed out: the
        webhook is down, as while ``make run`` starts) ends the round: the others stay due, untried, for the next
        one. Safe to run in several processes at once.
        """
        deliveries = []
        for _ in range(limit):
            callback = self._claim_next(callback_ids)
            if callback is None:
                break
            delivery = self._send(callback, send)
            deliveries.append(delivery)
            if delivery.status is None:
                break
        return deliveries

    def _claim_next(self, callback_ids: list[int] | None) -> SimCallback | None:
        now = timezone.now()
        with transaction.atomic():
            due = SimCallback.objects.select_for_update(no_key=True, skip_locked=True).filter(
                delivered_at__isnull=True, due_at__lte=now
            )
            if callback_ids is not None:
                due = due.filter(pk__in=callback_ids)
            callback = due.order_by("due_at", "id").first()
            if callback is None:
                return None
            if not callback.applied:
                self._apply(callback)
                callback.applied = True
            callback.attempts += 1
            callback.due_at = now + timedelta(seconds=settings.CUSTODY_SIMULATOR_HTTP_TIMEOUT + DELIVERY_LEASE)
            callback.save(update_fields=["applied", "attempts", "due_at"])
        return callback

    def _apply(self, callback: SimCallback) -> None:
        """The chain moves on: the deposit gains confirmations, or the withdrawal reaches its outcome."""
        payload = callback.payload
        if callback.deposit_id:
            deposit = SimDeposit.objects.select_for_update(no_key=True).get(pk=callback.deposit_id)
            confirmed = payload["status"] == "confirmed" and deposit.status == "pending"
            SimDeposit.objects.filter(pk=deposit.pk).update(
                confirmations=max(deposit.confirmations, payload["confirmations"]),
                status="confirmed" if confirmed else deposit.status,
            )
            # The coins count in the wallet from the first report of them (under the deposit's lock, so once): what
            # the exchange may credit is then always in the holdings (reconciliation's invariant 5).
            if not SimCallback.objects.filter(deposit_id=deposit.pk, applied=True).exists():
                wallet = _wallet_locked(deposit.asset_code)
                SimWallet.objects.filter(pk=wallet.pk).update(balance=F("balance") + deposit.amount)
        elif callback.withdrawal_id:
            withdrawal = SimWithdrawal.objects.select_for_update(no_key=True).get(pk=callback.withdrawal_id)
            if withdrawal.status == "accepted":
                SimWithdrawal.objects.filter(pk=withdrawal.pk).update(status=payload["status"])
                if payload["status"] == "completed" and SimAddress.objects.filter(address=withdrawal.address).exists():
                    # Sent to one of our own addresses: on chain that is a deposit like any other.
                    self.deposit_receive(address=withdrawal.address, amount=withdrawal.amount, txid=withdrawal.txid)
                if payload["status"] == "failed":
                    wallet = _wallet_locked(withdrawal.asset_code)
                    SimWallet.objects.filter(pk=wallet.pk).update(
                        balance=F("balance") + withdrawal.amount + withdrawal.network_fee
                    )

    def _send(self, callback: SimCallback, send: Sender | None) -> Delivery:
        body = json.dumps({"event_id": callback.event_id, **callback.payload}, separators=(",", ":")).encode()
        headers = signing.signed_headers(secret=settings.CUSTODY_WEBHOOK_SECRET, body=body)
        status, error = None, ""
        try:
            if send is not None:
                status = send(body, headers)
            else:
                status = requests.post(
                    settings.CUSTODY_CALLBACK_URL,
                    data=body,
                    headers=headers,
                    timeout=settings.CUSTODY_SIMULATOR_HTTP_TIMEOUT,
                ).status_code
        except requests.RequestException as exc:
            error = f"{type(exc).__name__}: {exc}"
        delivery = Delivery(callback.event_id, status, error or ("" if status and status < 300 else f"HTTP {status}"))
        if delivery.delivered:
            SimCallback.objects.filter(pk=callback.pk).update(delivered_at=timezone.now(), last_error="")
        else:
            backoff = min(2 ** (callback.attempts - 1), DELIVERY_BACKOFF_MAX)
            SimCallback.objects.filter(pk=callback.pk).update(
                due_at=timezone.now() + timedelta(seconds=backoff), last_error=delivery.error[:1000]
            )
            log.warning("custody callback %s not delivered: %s", callback.event_id, delivery.error)
        return delivery


def _schedule_delivery(callback_id: int, delay: float) -> None:
    """Queue :func:`~apps.wallets.custody.simulator.tasks.callback_deliver` ``delay`` seconds from now, by name (that
    module imports this one)."""
    current_app.send_task(CALLBACK_DELIVER_TASK, args=[callback_id], countdown=delay)
