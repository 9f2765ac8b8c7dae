"""Deposit addresses, deposits, withdrawals and the inbox of custody callbacks.

States and the rules between fields are CHECK constraints, so PostgreSQL refuses a row that
breaks them whatever code writes it (DESIGN.md sections 5 and 8):

- a deposit is unique on (network, txid, vout); it is credited at most once, and a credited
  deposit names its journal entry (invariant 8);
- a withdrawal's remaining hold is its amount plus fee while it is pending, and zero once it
  has ended (completed, rejected, cancelled or failed: invariants 4 and 8);
- a custody event is unique on the provider's event id; a processed one has its time.

Writes go through :mod:`apps.wallets.services`.
"""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from apps.ledger.models import AmountField, Asset, JournalEntry


class DepositAddress(models.Model):
    """The address a user deposits ``asset`` to, handed out by the custody provider; one per user and asset."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="deposit_addresses")
    asset = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="+")
    network = models.CharField(max_length=32)
    address = models.CharField(max_length=128)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "deposit addresses"
        constraints = [
            models.UniqueConstraint(fields=["user", "asset"], name="deposit_address_one_per_user_asset"),
            models.UniqueConstraint(fields=["network", "address"], name="deposit_address_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.network}:{self.address}"


class DepositStatus(models.TextChoices):
    """``pending`` until the asset's confirmations are reached, then ``credited`` once; ``failed`` if dropped."""

    PENDING = "pending", "Pending"
    CREDITED = "credited", "Credited"
    FAILED = "failed", "Failed"


class Deposit(models.Model):
    """Coins received on chain at a user's deposit address: one transaction output ``(network, txid, vout)``.

    ``amount`` is in units of ``asset``; ``confirmations`` is the highest count the provider
    reported. ``entry`` is the journal entry that credited it (key
    ``deposit:<network>:<txid>:<vout>``).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="deposits")
    asset = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="+")
    address = models.ForeignKey(DepositAddress, on_delete=models.PROTECT, related_name="deposits")
    network = models.CharField(max_length=32)
    txid = models.CharField(max_length=128)
    vout = models.PositiveIntegerField()
    amount = AmountField()
    confirmations = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=DepositStatus.choices, default=DepositStatus.PENDING)
    entry = models.OneToOneField(JournalEntry, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    credited_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["network", "txid", "vout"], name="deposit_unique_output"),
            models.CheckConstraint(condition=Q(amount__gt=0), name="deposit_amount_positive"),
            models.CheckConstraint(condition=Q(status__in=DepositStatus.values), name="deposit_status_valid"),
            models.CheckConstraint(
                condition=Q(status=DepositStatus.CREDITED, entry__isnull=False, credited_at__isnull=False)
                | (~Q(status=DepositStatus.CREDITED) & Q(entry__isnull=True, credited_at__isnull=True)),
                name="deposit_credited_has_entry",
            ),
        ]

    def __str__(self) -> str:
        return f"deposit #{self.pk} {self.network}:{self.txid}:{self.vout}"

    @property
    def idempotency_key(self) -> str:
        """The ledger key of its credit (DESIGN.md section 4)."""
        return f"deposit:{self.network}:{self.txid}:{self.vout}"


class WithdrawalStatus(models.TextChoices):
    """DESIGN.md section 8: requested -> awaiting_confirmation | awaiting_approval | approved;
    awaiting_confirmation -> awaiting_approval | approved | expired; awaiting_approval -> approved | rejected;
    requested/awaiting_confirmation/awaiting_approval -> cancelled; approved -> submitted -> completed | failed;
    approved -> rejected while custody does not have it (``handed_over`` false: held back by a block)."""

    REQUESTED = "requested", "Requested"
    AWAITING_CONFIRMATION = "awaiting_confirmation", "Waiting for e-mail confirmation"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    APPROVED = "approved", "Approved"
    SUBMITTED = "submitted", "Submitted to custody"
    COMPLETED = "completed", "Completed"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"
    EXPIRED = "expired", "Expired (not confirmed in time)"


WITHDRAWAL_FINAL = (
    WithdrawalStatus.COMPLETED,
    WithdrawalStatus.REJECTED,
    WithdrawalStatus.CANCELLED,
    WithdrawalStatus.FAILED,
    WithdrawalStatus.EXPIRED,
)
WITHDRAWAL_PENDING = (
    WithdrawalStatus.REQUESTED,
    WithdrawalStatus.AWAITING_CONFIRMATION,
    WithdrawalStatus.AWAITING_APPROVAL,
    WithdrawalStatus.APPROVED,
    WithdrawalStatus.SUBMITTED,
)
# Statuses a withdrawal reaches only once it went to custody.
WITHDRAWAL_SUBMITTED = (WithdrawalStatus.SUBMITTED, WithdrawalStatus.COMPLETED, WithdrawalStatus.FAILED)
# Statuses whose hold was released; the others count against the daily limit.
WITHDRAWAL_RELEASED = (
    WithdrawalStatus.REJECTED,
    WithdrawalStatus.CANCELLED,
    WithdrawalStatus.FAILED,
    WithdrawalStatus.EXPIRED,
)
# Statuses in which the user may still cancel.
WITHDRAWAL_CANCELLABLE = (
    WithdrawalStatus.REQUESTED,
    WithdrawalStatus.AWAITING_CONFIRMATION,
    WithdrawalStatus.AWAITING_APPROVAL,
)


class Withdrawal(models.Model):
    """A user's request to send ``amount`` of ``asset`` to ``address``; ``fee`` is charged on top.

    Amounts are in units of ``asset``. ``hold_remaining`` is what the withdrawal holds of the
    user's funds: ``amount + fee`` while pending, zero once ended. The id is the custody
    idempotency key and names its journal entries (``withdrawal:<id>:hold|complete|release|network-fee``).
    ``request_key`` is the client's idempotency key (unique per user when given).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="withdrawals")
    asset = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="+")
    network = models.CharField(max_length=32)
    address = models.CharField(max_length=128)
    amount = AmountField()
    fee = AmountField()
    hold_remaining = AmountField()
    status = models.CharField(max_length=24, choices=WithdrawalStatus.choices, default=WithdrawalStatus.REQUESTED)
    request_key = models.CharField(max_length=64, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The operator who approved or rejected it.",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True, help_text="Why it was rejected or failed.")
    custody_reference = models.CharField(max_length=128, blank=True)
    submit_attempts = models.PositiveIntegerField(default=0, help_text="How many times it was handed to custody.")
    handed_over = models.BooleanField(
        default=False,
        help_text="Custody may have it: handed over, and custody has not answered that it never received it.",
    )
    last_error = models.TextField(blank=True)
    requeued_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    txid = models.CharField(max_length=128, blank=True)
    network_fee = AmountField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        permissions = [("approve_withdrawal", "Can approve and reject withdrawals")]
        indexes = [models.Index(fields=["user", "asset", "created_at"], name="withdrawal_user_asset_time")]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0, fee__gte=0), name="withdrawal_amounts_valid"),
            models.CheckConstraint(
                condition=Q(network_fee__isnull=True) | Q(network_fee__gte=0), name="withdrawal_network_fee_valid"
            ),
            models.CheckConstraint(condition=Q(status__in=WithdrawalStatus.values), name="withdrawal_status_valid"),
            models.CheckConstraint(
                condition=Q(status__in=WITHDRAWAL_PENDING, hold_remaining=F("amount") + F("fee"), ended_at__isnull=True)
                | Q(status__in=WITHDRAWAL_FINAL, hold_remaining=0, ended_at__isnull=False),
                name="withdrawal_hold_matches_status",
            ),
            models.CheckConstraint(
                condition=~Q(status__in=WITHDRAWAL_SUBMITTED) | Q(submitted_at__isnull=False),
                name="withdrawal_submitted_has_time",
            ),
            models.CheckConstraint(
                condition=~Q(status=WithdrawalStatus.COMPLETED) | ~Q(txid=""), name="withdrawal_completed_has_txid"
            ),
            models.UniqueConstraint(
                fields=["user", "request_key"], condition=~Q(request_key=""), name="withdrawal_request_key_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"withdrawal #{self.pk} ({self.status})"

    @property
    def reject_reason(self) -> str:
        """The operator's reason when rejected (shown to the customer); empty in any other state."""
        return self.reason if self.status == WithdrawalStatus.REJECTED else ""

    @property
    def total(self) -> Decimal:
        """``amount + fee``: what is held, and what leaves the user's funds on completion."""
        return self.amount + self.fee

    def key(self, step: str) -> str:
        """The ledger key of a step: ``hold``, ``complete``, ``release`` or ``network-fee``."""
        return f"withdrawal:{self.pk}:{step}"


class WithdrawalAddressStatus(models.TextChoices):
    """API.md's statuses of an address book entry, derived from its times (:attr:`WithdrawalAddress.status`)."""

    PENDING_CONFIRMATION = "pending_confirmation", "Waiting for e-mail confirmation"
    COOLING_OFF = "cooling_off", "Cooling off"
    ACTIVE = "active", "Active"


class WithdrawalAddress(models.Model):
    """An address in a user's withdrawal address book: withdrawals of ``asset`` may go only to ``active`` ones.

    ``confirmed_at`` is set once, when the user follows the link e-mailed when it was added;
    ``usable_from`` is then ``confirmed_at`` plus ``WITHDRAWAL_ADDRESS_COOLING_OFF_SECONDS``.
    Deleting an entry removes it (a later withdrawal to it is refused; adding it again starts over).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="withdrawal_addresses")
    asset = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="+")
    network = models.CharField(max_length=32)
    address = models.CharField(max_length=128)
    label = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)
    usable_from = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "withdrawal addresses"
        constraints = [
            models.UniqueConstraint(fields=["user", "asset", "address"], name="withdrawal_address_unique"),
            models.CheckConstraint(
                condition=Q(confirmed_at__isnull=True, usable_from__isnull=True)
                | Q(confirmed_at__isnull=False, usable_from__gte=F("confirmed_at")),
                name="withdrawal_address_usable_after_confirmation",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.network}:{self.address}"

    def status_at(self, now) -> str:
        """``pending_confirmation`` before the e-mail link was followed, ``cooling_off`` until ``usable_from``,
        then ``active``."""
        if self.confirmed_at is None:
            return WithdrawalAddressStatus.PENDING_CONFIRMATION
        if now < self.usable_from:
            return WithdrawalAddressStatus.COOLING_OFF
        return WithdrawalAddressStatus.ACTIVE


class EventType(models.TextChoices):
    DEPOSIT = "deposit", "Deposit"
    WITHDRAWAL = "withdrawal", "Withdrawal"


class EventState(models.TextChoices):
    """Inbox processing: ``received`` (queued), ``processed``, or ``rejected`` (cannot apply; needs an operator)."""

    RECEIVED = "received", "Received"
    PROCESSED = "processed", "Processed"
    REJECTED = "rejected", "Rejected"


class CustodyEventStatus(models.TextChoices):
    """What a callback reports (API.md "Custody webhook"): a deposit is ``pending``, ``confirmed`` or ``failed``;
    a withdrawal ``pending``, ``completed`` or ``failed``."""

    PENDING = "pending", "Pending"
    CONFIRMED = "confirmed", "Confirmed"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"


# The statuses each type of callback may report.
EVENT_STATUSES = {
    EventType.DEPOSIT: (CustodyEventStatus.PENDING, CustodyEventStatus.CONFIRMED, CustodyEventStatus.FAILED),
    EventType.WITHDRAWAL: (CustodyEventStatus.PENDING, CustodyEventStatus.COMPLETED, CustodyEventStatus.FAILED),
}


class CustodyEvent(models.Model):
    """The inbox: one custody callback, stored (and committed) before the webhook answers 200.

    The fields are the validated body (amounts in units of ``asset``); ``body`` is the raw
    body, ``body_hash`` its SHA-256. Processing marks the event ``processed`` in the same
    transaction as its postings, so it is applied exactly once however often it is queued.
    """

    event_id = models.CharField(max_length=200, unique=True)
    type = models.CharField(max_length=16, choices=EventType.choices)
    status = models.CharField(max_length=16, choices=CustodyEventStatus.choices, help_text="As reported.")
    asset = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="+")
    amount = AmountField()
    txid = models.CharField(max_length=128, blank=True)
    vout = models.PositiveIntegerField(null=True, blank=True)
    address = models.CharField(max_length=128, blank=True)
    confirmations = models.PositiveIntegerField(null=True, blank=True)
    withdrawal = models.ForeignKey(Withdrawal, null=True, blank=True, on_delete=models.PROTECT, related_name="events")
    network_fee = AmountField(null=True, blank=True)
    body = models.TextField()
    body_hash = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=EventState.choices, default=EventState.RECEIVED)
    received_at = models.DateTimeField(auto_now_add=True)
    requeued_at = models.DateTimeField(null=True, blank=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            # The events still to process, in arrival order: what workers claim (and the sweep looks at).
            models.Index(fields=["id"], condition=Q(state=EventState.RECEIVED), name="custody_event_to_process")
        ]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="custody_event_amount_positive"),
            models.CheckConstraint(
                condition=Q(network_fee__isnull=True) | Q(network_fee__gte=0), name="custody_event_network_fee_valid"
            ),
            models.CheckConstraint(condition=Q(type__in=EventType.values), name="custody_event_type_valid"),
            models.CheckConstraint(
                condition=Q(type=EventType.DEPOSIT, status__in=EVENT_STATUSES[EventType.DEPOSIT], vout__isnull=False)
                | Q(
                    type=EventType.WITHDRAWAL,
                    status__in=EVENT_STATUSES[EventType.WITHDRAWAL],
                    withdrawal__isnull=False,
                ),
                name="custody_event_fields_match_type",
            ),
            models.CheckConstraint(
                condition=Q(state=EventState.RECEIVED, processed_at__isnull=True)
                | Q(state__in=[EventState.PROCESSED, EventState.REJECTED], processed_at__isnull=False),
                name="custody_event_state_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"custody event {self.event_id} ({self.type} {self.status}, {self.state})"
