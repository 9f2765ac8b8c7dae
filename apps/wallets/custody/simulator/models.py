"""The simulated provider's own books: wallets, received deposits, withdrawals, its callback outbox.

Amounts are ``NUMERIC(38, 18)`` in units of the asset (the provider knows asset codes, not the
exchange's assets). The provider's wallet balance may never go below zero.
"""

from decimal import Decimal

from django.db import models
from django.db.models import Q


def _amount(**kwargs) -> models.DecimalField:
    return models.DecimalField(max_digits=38, decimal_places=18, **kwargs)


class SimAddress(models.Model):
    """A deposit address the provider handed out; ``label`` is what the exchange said it is for."""

    network = models.CharField(max_length=32)
    address = models.CharField(max_length=128, unique=True)
    asset_code = models.CharField(max_length=10)
    label = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.asset_code} {self.address}"


class SimWallet(models.Model):
    """What the provider holds for the exchange in one asset: the figure it reports (invariant 5)."""

    asset_code = models.CharField(max_length=10, unique=True)
    balance = _amount(default=Decimal(0))

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(balance__gte=0), name="sim_wallet_not_negative")]

    def __str__(self) -> str:
        return f"{self.asset_code} {self.balance}"


class SimDeposit(models.Model):
    """Coins received on chain at one of the provider's addresses.

    ``confirmations`` grows as the provider's callbacks go out; the deposit counts in the
    wallet from its first callback (``status`` becomes ``confirmed`` with the last).
    """

    network = models.CharField(max_length=32)
    asset_code = models.CharField(max_length=10)
    address = models.CharField(max_length=128)
    txid = models.CharField(max_length=128)
    vout = models.PositiveIntegerField(default=0)
    amount = _amount()
    confirmations = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, default="pending")  # pending, confirmed
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["network", "txid", "vout"], name="sim_deposit_unique_output"),
            models.CheckConstraint(condition=Q(amount__gt=0), name="sim_deposit_amount_positive"),
            models.CheckConstraint(condition=Q(status__in=["pending", "confirmed"]), name="sim_deposit_status"),
        ]

    def __str__(self) -> str:
        return f"{self.asset_code} {self.txid}:{self.vout}"


class SimWithdrawal(models.Model):
    """A withdrawal the provider accepted; ``client_reference`` is the exchange's withdrawal id (unique).

    ``amount + network_fee`` leaves the wallet on acceptance and comes back if it fails.
    ``requests`` counts the submissions received for it (retries included).
    """

    client_reference = models.CharField(max_length=64, unique=True)
    network = models.CharField(max_length=32)
    asset_code = models.CharField(max_length=10)
    address = models.CharField(max_length=128)
    amount = _amount()
    network_fee = _amount(default=Decimal(0))
    txid = models.CharField(max_length=128)
    status = models.CharField(max_length=16, default="accepted")  # accepted, completed, failed
    requests = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0, network_fee__gte=0), name="sim_withdrawal_amounts"),
            models.CheckConstraint(
                condition=Q(status__in=["accepted", "completed", "failed"]), name="sim_withdrawal_status"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.client_reference} ({self.status})"


class SimFault(models.Model):
    """A scripted misbehaviour, consumed by the next ``times`` matching calls.

    ``operation`` ``submit`` with ``kind`` ``timeout`` (the provider accepts the withdrawal but
    the answer never arrives), ``unavailable`` (nothing happens, no answer) or ``reject`` (a
    definite refusal); ``operation`` ``outcome`` with ``kind`` ``fail`` (the withdrawal fails
    on chain). ``address`` selects the withdrawals it applies to.
    """

    operation = models.CharField(max_length=16)
    kind = models.CharField(max_length=16)
    address = models.CharField(max_length=128)
    remaining = models.PositiveIntegerField(default=1)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(operation="submit", kind__in=["timeout", "unavailable", "reject"])
                | Q(operation="outcome", kind="fail"),
                name="sim_fault_kind",
            )
        ]

    def __str__(self) -> str:
        return f"{self.operation} {self.kind} {self.address}"


class SimCallback(models.Model):
    """The provider's outbox: one callback to send, retried with back-off until the webhook answers 2xx.

    Sending applies its effect to the provider's books first, once (``applied``): the deposit
    gains the confirmations it reports, a final withdrawal outcome settles the wallet.
    """

    event_id = models.CharField(max_length=64, unique=True)
    payload = models.JSONField()
    deposit = models.ForeignKey(SimDeposit, null=True, blank=True, on_delete=models.CASCADE)
    withdrawal = models.ForeignKey(SimWithdrawal, null=True, blank=True, on_delete=models.CASCADE)
    due_at = models.DateTimeField(db_index=True)
    applied = models.BooleanField(default=False)
    delivered_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["due_at", "id"], condition=Q(delivered_at__isnull=True), name="sim_callback_due")
        ]

    def __str__(self) -> str:
        return self.event_id
