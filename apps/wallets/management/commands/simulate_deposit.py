"""``manage.py simulate_deposit --user NAME --asset CODE --amount X [--txid T]``.

The simulated custody receives the coins at the user's deposit address and sends its signed
callbacks (0 to ``CUSTODY_SIMULATOR_CONFIRMATIONS`` confirmations, ``CUSTODY_SIMULATOR_DELAY``
seconds apart) to ``CUSTODY_CALLBACK_URL``, as a real provider would; the credit follows
through the webhook and the worker. Exit 1 if a callback could not be delivered (the
simulator retries it later).
"""

import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import OperationalError
from django.utils import timezone

from apps.core.errors import DomainError
from apps.ledger.amounts import parse_amount
from apps.ledger.models import Asset
from apps.wallets.custody.base import CustodyError
from apps.wallets.custody.simulator.models import SimCallback
from apps.wallets.custody.simulator.required import simulated_custody_required
from apps.wallets.services import MAX_COUNT, deposit_address_get_or_create, txid_problem


class Command(BaseCommand):
    help = "Deposit coins to a user's address at the simulated custody, which reports them to the webhook."

    def add_arguments(self, parser):
        parser.add_argument("--user", required=True, metavar="NAME", help="username of the depositor")
        parser.add_argument("--asset", required=True, metavar="CODE", help="asset code, e.g. BTC")
        parser.add_argument("--amount", required=True, metavar="X", help="plain decimal amount, e.g. 0.5")
        parser.add_argument("--txid", metavar="T", help="transaction id (default: random)")
        parser.add_argument("--vout", type=int, default=0, help="output index (default 0)")

    def handle(self, *args, **options):
        try:
            self.deposit(**options)
        except OperationalError as exc:
            raise CommandError(
                f"Cannot reach the database ({str(exc).strip()[:120]}): is `make run` running?"
            ) from None

    def deposit(self, **options):
        custody = simulated_custody_required("simulate_deposit")
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"No user {options['user']!r}.")
        asset = Asset.objects.filter(code=options["asset"]).first()
        if asset is None:
            raise CommandError(f"No asset {options['asset']!r}.")
        if not 0 <= options["vout"] <= MAX_COUNT:
            raise CommandError(f"--vout must be from 0 to {MAX_COUNT}.")
        problem = txid_problem(options["txid"]) if options["txid"] is not None else None
        if problem:
            raise CommandError(f"--txid: {problem}")
        try:
            amount = parse_amount(options["amount"], decimals=asset.decimals)
            address = deposit_address_get_or_create(user_id=user.id, asset=asset)
            deposit = custody.deposit_receive(
                address=address.address, amount=amount, txid=options["txid"], vout=options["vout"]
            )
        except (DomainError, CustodyError, ValueError) as exc:
            raise CommandError(getattr(exc, "message", str(exc))) from None
        self.stdout.write(f"{amount} {asset} received at {address.address} in {deposit.txid}:{deposit.vout}")

        callbacks = list(SimCallback.objects.filter(deposit=deposit).order_by("due_at", "id"))
        for callback in callbacks:
            wait = (callback.due_at - timezone.now()).total_seconds()
            if wait > 0:
                time.sleep(wait)
            deliveries = custody.callbacks_deliver_due(callback_ids=[callback.pk])
            for delivery in deliveries:
                payload = callback.payload
                if not delivery.delivered:
                    raise CommandError(
                        f"callback {delivery.event_id} not delivered to the webhook ({delivery.error}); "
                        "the simulated custody will retry it."
                    )
                self.stdout.write(
                    f"callback {payload['status']} with {payload['confirmations']} confirmations: "
                    f"HTTP {delivery.status}"
                )
