"""Assets, the chart of accounts, journal entries and postings.

The rules that must hold whatever code runs are declared here so PostgreSQL
enforces them (DESIGN.md section 5):

- invariant 1: statement-level triggers (with transition tables) refuse, at the end of
  the INSERT, any journal entry whose postings do not sum to zero per asset, that has
  fewer than two postings, or whose amounts are not exact multiples of the asset's
  precision (so an entry and its postings are written in one statement);
- invariant 3: a CHECK constraint keeps ``user_available`` and ``user_held`` at or above zero;
- invariant 6: triggers refuse UPDATE and DELETE of entries and postings;
- invariant 7: the idempotency key is unique.

Writes go through :mod:`apps.ledger.services` only.
"""

from decimal import Decimal

import pgtrigger
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Round

from apps.core import triggers as enforced

from .amounts import is_exact
from .forms import PlainAmountFormField

AMOUNT_MAX_DIGITS = 38
AMOUNT_DECIMAL_PLACES = 18


class AmountField(models.DecimalField):
    """``NUMERIC(38, 18)``: every amount of every asset, exact."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("max_digits", AMOUNT_MAX_DIGITS)
        kwargs.setdefault("decimal_places", AMOUNT_DECIMAL_PLACES)
        super().__init__(*args, **kwargs)

    def formfield(self, **kwargs):
        """A form field taking plain ASCII decimals only (:class:`~apps.ledger.forms.PlainAmountFormField`)."""
        return super().formfield(**{"form_class": PlainAmountFormField, **kwargs})


def _multiple_of_precision(field: str) -> Q:
    """``field`` is an exact multiple of ``10 ** -decimals`` (SQL ``round(x, decimals) = x``)."""
    # Round takes an expression as its precision (Django >= 4.0); the stubs say int.
    return Q(**{field: Round(F(field), F("decimals"))})  # type: ignore[arg-type]


WITHDRAWAL_AMOUNT_FIELDS = (
    "withdrawal_fee",
    "min_withdrawal",
    "withdrawal_auto_approve_limit",
    "withdrawal_daily_limit",
)
"""An asset's withdrawal settings, amounts of the asset: never negative, exact to its precision."""


class Asset(models.Model):
    """A currency the exchange holds: ``decimals`` is its ledger precision (BTC 8, USDT 6, ETH 18).

    Withdrawal settings are amounts of this asset: ``withdrawal_fee`` is charged per
    withdrawal, ``min_withdrawal`` is the smallest amount, ``withdrawal_auto_approve_limit``
    the most a user's withdrawals approved without an operator may add up to in 24 hours, ``withdrawal_daily_limit`` the most a
    user may withdraw in 24 hours. ``network`` names the chain (deposit addresses are
    validated per network); ``confirmations_required`` is when a deposit is credited.
    ``display_decimals`` is how many decimals pages show (empty: all of ``decimals``); the
    stored amounts stay exact, and pages give the full amount in a tooltip.
    """

    code = models.CharField(
        max_length=10,
        unique=True,
        validators=[RegexValidator(r"^[A-Z0-9]{2,10}$", "2 to 10 upper-case letters or digits.")],
    )
    name = models.CharField(max_length=100)
    decimals = models.PositiveSmallIntegerField(validators=[MaxValueValidator(AMOUNT_DECIMAL_PLACES)])
    network = models.CharField(max_length=32, default="simnet")
    confirmations_required = models.PositiveSmallIntegerField(default=1)
    withdrawal_fee = AmountField(default=Decimal(0))
    min_withdrawal = AmountField(default=Decimal(0))
    withdrawal_auto_approve_limit = AmountField(default=Decimal(0))
    withdrawal_daily_limit = AmountField(default=Decimal(0))
    display_decimals = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(AMOUNT_DECIMAL_PLACES)],
        help_text="Decimals shown on pages (at most the asset's decimals); empty shows them all.",
    )

    class Meta:
        ordering = ["code"]
        # Amounts already stored are multiples of the precision: it can never change.
        triggers = [enforced.ReadOnly(name="precision_fixed", fields=["code", "decimals"])]
        constraints = [
            models.CheckConstraint(condition=Q(decimals__lte=AMOUNT_DECIMAL_PLACES), name="asset_decimals_max_18"),
            models.CheckConstraint(
                condition=Q(
                    withdrawal_fee__gte=0,
                    min_withdrawal__gte=0,
                    withdrawal_auto_approve_limit__gte=0,
                    withdrawal_daily_limit__gte=0,
                ),
                name="asset_amounts_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(display_decimals__isnull=True) | Q(display_decimals__lte=F("decimals")),
                name="asset_display_decimals_within_decimals",
            ),
            *(
                models.CheckConstraint(condition=_multiple_of_precision(field), name=f"asset_{field}_precision")
                for field in WITHDRAWAL_AMOUNT_FIELDS
            ),
        ]

    def __str__(self) -> str:
        return self.code

    @property
    def quantum(self) -> Decimal:
        """The smallest amount of this asset, ``10 ** -decimals``."""
        return Decimal(1).scaleb(-self.decimals)

    @property
    def display_places(self) -> int:
        """Decimals pages show for this asset: ``display_decimals``, else all of ``decimals``."""
        return self.decimals if self.display_decimals is None else min(self.display_decimals, self.decimals)

    def clean(self) -> None:
        """Model validation (admin forms): the display precision is at most the ledger precision, and the withdrawal
        settings are zero or more and exact to the asset's precision, as field errors (the database's constraints
        ``asset_amounts_not_negative`` and ``asset_<field>_precision`` refuse the same)."""
        errors = {}
        if self.display_decimals is not None and self.decimals is not None and self.display_decimals > self.decimals:
            errors["display_decimals"] = f"At most the asset's {self.decimals} decimals."
        for field in WITHDRAWAL_AMOUNT_FIELDS:
            value = getattr(self, field)
            if value is None:
                continue
            if value < 0:
                errors[field] = "Must be zero or more."
            elif self.decimals is not None and not is_exact(value, self.decimals):
                errors[field] = f"At most {self.decimals} decimal places ({self.code} precision)."
        if errors:
            raise ValidationError(errors)


class AccountKind(models.TextChoices):
    """The chart of accounts (DESIGN.md section 3)."""

    USER_AVAILABLE = "user_available", "User available"
    USER_HELD = "user_held", "User held"
    CUSTODY = "custody", "Custody"
    FEE_REVENUE = "fee_revenue", "Fee revenue"
    NETWORK_FEE_EXPENSE = "network_fee_expense", "Network fee expense"
    EQUITY = "equity", "Equity"


USER_KINDS = (AccountKind.USER_AVAILABLE, AccountKind.USER_HELD)
SYSTEM_KINDS = (AccountKind.CUSTODY, AccountKind.FEE_REVENUE, AccountKind.NETWORK_FEE_EXPENSE, AccountKind.EQUITY)
DEBIT_NORMAL_KINDS = (AccountKind.CUSTODY, AccountKind.NETWORK_FEE_EXPENSE)


def normal_sign(kind: str) -> int:
    """+1 for debit-normal accounts, -1 for credit-normal ones.

    Postings are signed (debit positive); ``balance = normal_sign * sum(postings)``.
    """
    return 1 if kind in DEBIT_NORMAL_KINDS else -1


def _truncated_with_postings() -> enforced.Trigger:
    """A table that postings name (accounts, journal entries) is emptied only with ``ledger_posting`` in the same
    ``TRUNCATE`` (row triggers do not fire on it): checked after the whole command, when the postings are gone."""
    return enforced.Trigger(
        name="truncated_with_postings",
        when=pgtrigger.After,
        operation=pgtrigger.Truncate,
        level=pgtrigger.Statement,
        func="""
        IF EXISTS (SELECT 1 FROM ledger_posting) THEN
            RAISE EXCEPTION 'postings still name rows of %: truncate it together with ledger_posting', TG_TABLE_NAME
                USING ERRCODE = 'foreign_key_violation';
        END IF;
        RETURN NULL;
        """,
    )


class Account(models.Model):
    """One account of the chart per (kind, asset, owner) for users, per (kind, asset, shard) for the system.

    ``balance`` is the account's balance in its normal direction, in units of ``asset``,
    kept equal to ``normal_sign(kind) * sum(postings.amount)`` by the posting service;
    ``version`` counts the postings applied. Hot system accounts (fee revenue) are split
    into shards that reports sum.
    """

    kind = models.CharField(max_length=32, choices=AccountKind.choices)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="ledger_accounts"
    )
    asset = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="accounts")
    shard = models.PositiveSmallIntegerField(default=0)
    balance = AmountField(default=Decimal(0))
    version = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        # Postings name their account and its asset (checked per INSERT by the posting's ``entry_balanced``
        # trigger): an account is never deleted and its id and asset never change, so what was checked stays true.
        # Nor do its owner, kind and shard: the sealed journal names accounts by id, so an UPDATE of the owner moved a
        # customer's balance to another customer and journal_verify still passed (break-it review).
        triggers = [
            enforced.Protect(name="permanent", operation=pgtrigger.Delete),
            enforced.ReadOnly(name="keys_fixed", fields=["id", "asset", "owner", "kind", "shard"]),
            _truncated_with_postings(),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "asset", "kind"], condition=Q(owner__isnull=False), name="account_unique_per_user"
            ),
            models.UniqueConstraint(
                fields=["kind", "asset", "shard"], condition=Q(owner__isnull=True), name="account_unique_per_shard"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=USER_KINDS, owner__isnull=False, shard=0)
                | Q(kind__in=SYSTEM_KINDS, owner__isnull=True),
                name="account_owner_matches_kind",
            ),
            models.CheckConstraint(
                condition=~Q(kind__in=USER_KINDS) | Q(balance__gte=0), name="account_user_balance_not_negative"
            ),
        ]

    def __str__(self) -> str:
        owner = self.owner.get_username() if self.owner is not None else f"shard {self.shard}"
        return f"{self.kind} {self.asset_id and self.asset.code} ({owner})"

    @property
    def is_user_account(self) -> bool:
        return self.kind in USER_KINDS


class EntryReason(models.TextChoices):
    """Why an entry was posted: one value per posting recipe (DESIGN.md section 4)."""

    DEPOSIT = "deposit", "Deposit confirmed"
    ORDER_HOLD = "order_hold", "Order placed"
    TRADE = "trade", "Fill"
    ORDER_RELEASE = "order_release", "Order ended with hold left"
    WITHDRAWAL_HOLD = "withdrawal_hold", "Withdrawal requested"
    WITHDRAWAL_COMPLETE = "withdrawal_complete", "Withdrawal completed"
    WITHDRAWAL_RELEASE = "withdrawal_release", "Withdrawal rejected, cancelled or failed"
    NETWORK_FEE = "network_fee", "Network fee reported"
    TRANSFER = "transfer", "Transfer between users"
    ADJUSTMENT = "adjustment", "Manual adjustment"
    HOLD = "hold", "Funds held"
    RELEASE = "release", "Funds released"


class JournalEntry(models.Model):
    """One balanced movement of value: two or more postings summing to zero per asset.

    ``idempotency_key`` names the business event (``trade:<id>``, ``deposit:...``); an
    event is applied at most once. ``payload_hash`` fingerprints reason, reference and
    legs so a replay with a different payload is detected.
    """

    idempotency_key = models.CharField(max_length=200, unique=True)
    reason = models.CharField(max_length=32, choices=EntryReason.choices)
    reference_type = models.CharField(max_length=32, blank=True)
    reference_id = models.CharField(max_length=64, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    payload_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(db_index=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_index=False
    )

    class Meta:
        verbose_name_plural = "journal entries"
        ordering = ["-id"]
        # No index on the reference: nothing looks entries up by it (the admin's search is a substring match),
        # and each index is written on every entry (migration 0007).
        triggers = [
            enforced.append_only(),  # invariant 6: corrections are new entries
            _truncated_with_postings(),
            # Statement-level, with the statement's new rows as a table: one check per INSERT, not one per row
            # at commit. So an entry is written together with its postings, in one statement.
            enforced.Trigger(
                name="has_postings",
                when=pgtrigger.After,
                operation=pgtrigger.Insert,
                level=pgtrigger.Statement,
                referencing=pgtrigger.Referencing(new="new_entries"),
                declare=[("short_entry", "bigint")],
                func="""
                SELECT e.id INTO short_entry FROM new_entries e
                WHERE (SELECT count(*) FROM ledger_posting p WHERE p.entry_id = e.id) < 2
                LIMIT 1;
                IF FOUND THEN
                    RAISE EXCEPTION 'journal entry % has fewer than two postings', short_entry
                        USING ERRCODE = 'check_violation';
                END IF;
                RETURN NULL;
                """,
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.id} {self.idempotency_key}"


class Posting(models.Model):
    """One leg of a journal entry: a signed ``amount`` of ``asset`` (debit positive, credit negative).

    ``balance_after`` is the account's balance (normal direction) right after this
    posting, so statements need no re-summing. ``asset`` repeats the account's asset
    so the per-asset balance check is one index scan.

    The references are checked by the statement-level ``entry_balanced`` trigger, not by foreign keys: its
    one query per INSERT finds each new posting's entry and its account with the same asset, where foreign
    keys ran a lookup and a row lock per posting and reference (about 1.7 ms of a 100-entry batch, the lock of
    the hot fee account included: ``bench/ledger.py``, migration 0010). What they were checked against stays:
    entries are append-only (``immutable``) and accounts permanent with a fixed id and asset (their triggers).
    """

    # Indexed by (account, id) below; the asset has no index of its own.
    entry = models.ForeignKey(JournalEntry, on_delete=models.PROTECT, related_name="postings", db_constraint=False)
    account = models.ForeignKey(
        Account, on_delete=models.PROTECT, related_name="postings", db_index=False, db_constraint=False
    )
    asset = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="+", db_index=False, db_constraint=False)
    amount = AmountField()
    balance_after = AmountField()

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["account", "id"], name="posting_account_id")]
        constraints = [models.CheckConstraint(condition=~Q(amount=0), name="posting_amount_not_zero")]
        triggers = [
            enforced.append_only(),
            # Statement-level like the entry's check, and reading only what the statement names: postings are
            # append-only, so an entry balances per asset if and only if each INSERT of its postings balances on
            # its own (the rows of that statement, ``new_postings``). The second query does what three foreign
            # keys did (see the docstring): each new posting's account and entry found by primary key (a LATERAL
            # subquery with OFFSET 0 is never turned into a join, so no plan hashes or scans a whole table).
            enforced.Trigger(
                name="entry_balanced",
                when=pgtrigger.After,
                operation=pgtrigger.Insert,
                level=pgtrigger.Statement,
                referencing=pgtrigger.Referencing(new="new_postings"),
                declare=[("offending", "bigint"), ("unknown_account", "boolean"), ("unknown_entry", "boolean")],
                func="""
                SELECT n.entry_id INTO offending FROM new_postings n
                GROUP BY n.entry_id, n.asset_id HAVING sum(n.amount) <> 0
                ORDER BY n.entry_id
                LIMIT 1;
                IF FOUND THEN
                    RAISE EXCEPTION 'journal entry % does not balance per asset', offending
                        USING ERRCODE = 'check_violation';
                END IF;
                SELECT n.id, a.id IS NULL, j.id IS NULL INTO offending, unknown_account, unknown_entry
                FROM new_postings n
                LEFT JOIN LATERAL (
                    SELECT a.id, s.decimals FROM ledger_account a JOIN ledger_asset s ON s.id = a.asset_id
                    WHERE a.id = n.account_id AND a.asset_id = n.asset_id OFFSET 0
                ) a ON true
                LEFT JOIN LATERAL (SELECT j.id FROM ledger_journalentry j WHERE j.id = n.entry_id OFFSET 0) j ON true
                WHERE a.id IS NULL OR j.id IS NULL OR round(n.amount, a.decimals) <> n.amount
                ORDER BY n.id
                LIMIT 1;
                IF unknown_account THEN
                    RAISE EXCEPTION 'posting % names no account of its asset', offending
                        USING ERRCODE = 'foreign_key_violation';
                ELSIF unknown_entry THEN
                    RAISE EXCEPTION 'posting % names no journal entry', offending
                        USING ERRCODE = 'foreign_key_violation';
                ELSIF FOUND THEN
                    RAISE EXCEPTION 'posting % is not a multiple of its asset''s precision', offending
                        USING ERRCODE = 'check_violation';
                END IF;
                RETURN NULL;
                """,
            ),
        ]

    def __str__(self) -> str:
        return f"{self.amount:+} {self.asset_id} on account {self.account_id}"


class SigningKey(models.Model):
    """An Ed25519 public key that has signed blocks or snapshots (PROOFS.md, the keys endpoint).

    ``key_id`` is the first 16 hex characters of ``SHA256(public key)``; ``public_key`` is the
    32-byte key in hex. Rows are never removed, so blocks signed before a key rotation stay
    verifiable.
    """

    key_id = models.CharField(max_length=16, primary_key=True)
    public_key = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at"]
        triggers = [enforced.append_only()]

    def __str__(self) -> str:
        return self.key_id


class JournalBlock(models.Model):
    """One sealed block of the journal (PROOFS.md section 1): its header fields, hash and signature.

    ``height`` counts from 0; ``previous_hash`` is the block hash of ``height - 1`` (64 zeros
    for block 0); ``entries_root`` is the RFC 6962 root of the digests of its ``entry_count``
    entries in id order; ``block_hash = SHA256(canon(header))``, signed by ``key``. Hashes
    and the signature are lower-case hex. Append-only.
    """

    height = models.PositiveBigIntegerField(primary_key=True)
    previous_hash = models.CharField(max_length=64)
    entries_root = models.CharField(max_length=64)
    entry_count = models.PositiveIntegerField()
    sealed_at = models.DateTimeField()
    block_hash = models.CharField(max_length=64, unique=True)
    signature = models.CharField(max_length=128)
    key = models.ForeignKey(SigningKey, on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["-height"]
        triggers = [enforced.append_only()]

    def __str__(self) -> str:
        return f"block {self.height}"


class BlockEntry(models.Model):
    """Membership of a journal entry in a block: each entry is in exactly one block, at ``position``.

    ``digest`` is the entry's digest (hex) as sealed, so verification names the entry whose
    rows no longer match. Append-only.
    """

    block = models.ForeignKey(JournalBlock, on_delete=models.PROTECT, related_name="members")
    entry = models.OneToOneField(JournalEntry, on_delete=models.PROTECT, related_name="seal")
    position = models.PositiveIntegerField()
    digest = models.CharField(max_length=64)

    class Meta:
        ordering = ["block", "position"]
        constraints = [models.UniqueConstraint(fields=["block", "position"], name="block_entry_position")]
        triggers = [enforced.append_only()]

    def __str__(self) -> str:
        return f"entry {self.entry_id} in block {self.block_id}"
