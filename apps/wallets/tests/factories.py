"""Helpers for tests that need coins that really went through custody (so invariant 5 holds)."""

import json
from datetime import timedelta
from decimal import Decimal

from django.test import Client
from django.utils import timezone

from apps.ledger.models import Asset
from apps.wallets.custody.simulator.models import SimCallback
from apps.wallets.custody.simulator.provider import SimulatedCustody
from apps.wallets.models import CustodyEvent, Deposit, EventState, WithdrawalAddress
from apps.wallets.services import custody_event_process, deposit_address_get_or_create


def webhook_sender(client: Client | None = None):
    """A ``send(body, headers) -> status`` for the simulated custody that calls the webhook in this process."""
    client = client or Client()

    def send(body: bytes, headers) -> int:
        extra = {name: value for name, value in headers.items() if name.lower() != "content-type"}
        return client.post("/custody/callbacks/", data=body, content_type="application/json", headers=extra).status_code

    return send


def deposit_through_custody(
    user, asset: Asset, amount: Decimal | str, *, txid: str | None = None, vout: int = 0
) -> Deposit:
    """Coins arrive for ``user`` at the simulated custody; its signed callbacks go through the webhook (in this
    process) and are processed here, without a worker. Returns the deposit, credited."""
    address = deposit_address_get_or_create(user_id=user.id, asset=asset)
    custody = SimulatedCustody()
    received = custody.deposit_receive(address=address.address, amount=Decimal(amount), txid=txid, vout=vout, delay=0)
    callbacks = list(SimCallback.objects.filter(deposit=received).values_list("pk", flat=True))
    deliveries = custody.callbacks_deliver_due(callback_ids=callbacks, send=webhook_sender())
    assert [delivery.status for delivery in deliveries] == [200] * len(callbacks), deliveries
    for event in CustodyEvent.objects.filter(txid=received.txid, state=EventState.RECEIVED).order_by("id"):
        custody_event_process(event_pk=event.pk)
    return Deposit.objects.get(network=received.network, txid=received.txid, vout=vout)


def deliver_custody_callbacks() -> list:
    """Deliver every due callback of the simulated custody to the webhook in this process, then process the
    inbox events they created, without a worker. Returns the deliveries."""
    deliveries = SimulatedCustody().callbacks_deliver_due(send=webhook_sender())
    for event in CustodyEvent.objects.filter(state=EventState.RECEIVED).order_by("id"):
        custody_event_process(event_pk=event.pk)
    return deliveries


def deposit_payload(
    address: str,
    amount: str,
    *,
    asset: str = "BTC",
    txid: str = "tx-1",
    vout: int = 0,
    confirmations: int | None = 1,
    status: str = "confirmed",
    event_id: str | None = None,
) -> dict:
    """A deposit callback body as API.md describes it."""
    payload = {
        "event_id": event_id or f"evt-{txid}-{vout}-{confirmations}-{status}",
        "type": "deposit",
        "asset": asset,
        "address": address,
        "amount": amount,
        "txid": txid,
        "vout": vout,
        "status": status,
    }
    if confirmations is not None:
        payload["confirmations"] = confirmations
    return payload


def signed(payload: dict, *, secret: str | None = None, timestamp: int | None = None) -> tuple[bytes, dict]:
    """``(body, headers)`` of a callback signed as the custody provider signs it."""
    from django.conf import settings

    from apps.wallets.custody.signing import signed_headers

    body = json.dumps(payload).encode()
    return body, signed_headers(secret=secret or settings.CUSTODY_WEBHOOK_SECRET, body=body, timestamp=timestamp)


def book_address(user, asset: Asset | str, address: str) -> WithdrawalAddress:
    """``address`` as an ``active`` entry of the user's withdrawal address book (confirmed, cooling-off over),
    for tests whose subject is not the address book itself."""
    asset = asset if isinstance(asset, Asset) else Asset.objects.get(code=asset)
    past = timezone.now() - timedelta(seconds=1)
    entry, _ = WithdrawalAddress.objects.get_or_create(
        user=user,
        asset=asset,
        address=address,
        defaults={"network": asset.network, "confirmed_at": past, "usable_from": past},
    )
    return entry
