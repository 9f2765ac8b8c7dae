"""Every write to the ledger: the only code that creates journal rows or changes a balance.

The core is :func:`entry_post` (DESIGN.md section 6). The recipe services below it
(hold, release, transfer, adjustment) build balanced legs and call it inside a
transaction that retries on deadlock (:func:`apps.ledger.transactions.retrying_atomic`).
Other apps call these services; they never write ledger models themselves.
"""

import hashlib
import json
import zlib
from collections import defaultdict
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import OperationalError, connection
from django.db.transaction import TransactionManagementError
from django.utils import timezone
from moneyed import Money

from apps.core.errors import DomainError, NotFound
from apps.core.reasons import reason_checked

from .amounts import check_amount, fits, format_amount, is_exact
from .db import PreparedCursor, array_literal
from .errors import IdempotencyConflict, InsufficientFunds, InvalidAmount, UnbalancedEntry
from .models import (
    AMOUNT_DECIMAL_PLACES,
    USER_KINDS,
    Account,
    AccountKind,
    Asset,
    EntryReason,
    JournalEntry,
)
from .transactions import is_retryable, retrying_atomic


@dataclass(frozen=True)
class Leg:
    """One side of a journal entry: a signed ``amount`` (debit positive, credit negative) on an account.

    ``amount`` is in units of the account's asset and must be an exact multiple of its precision.
    """

    account_id: int
    amount: Decimal


def debit(account: Account, amount: Decimal) -> Leg:
    """A debit of ``amount`` (positive) to ``account``."""
    return Leg(account.id, amount)


def credit(account: Account, amount: Decimal) -> Leg:
    """A credit of ``amount`` (positive) to ``account``."""
    return Leg(account.id, -amount)


# Assets --------------------------------------------------------------------------------------------


def asset_register(*, code: str, name: str, decimals: int, **attributes) -> Asset:
    """The asset ``code``, created with ``name``, ``decimals`` and the other ``attributes`` (Asset's fields:
    ``display_decimals``, ``network``, withdrawal fee and limits...) when it does not exist yet.

    Reference data, no money. An existing asset is returned unchanged: its code and precision never change
    (a trigger refuses it), and operators edit the rest in the back office. Concurrent registrations of one
    code are settled by its unique constraint.
    """
    asset, _ = Asset.objects.get_or_create(code=code, defaults={"name": name, "decimals": decimals, **attributes})
    return asset


# Accounts ------------------------------------------------------------------------------------------


_SELECT_USER_ACCOUNTS = """
    SELECT * FROM ledger_account WHERE asset_id = %s AND owner_id = ANY(%s) AND kind = ANY(%s)
"""
_SELECT_SYSTEM_ACCOUNT = """
    SELECT * FROM ledger_account WHERE kind = %s AND asset_id = %s AND shard = %s AND owner_id IS NULL
"""


def _user_accounts_get_or_create(asset: Asset, wanted: Sequence[tuple[int, str]]) -> list[Account]:
    """The accounts of ``asset`` named by ``(owner id, kind)`` pairs, in order, creating missing ones.

    One SELECT when they all exist; concurrent creators are settled by the unique constraint.
    """

    def fetch() -> dict[tuple[int | None, str], Account]:
        owners = sorted({owner_id for owner_id, _ in wanted})
        kinds = sorted({kind for _, kind in wanted})
        return {(a.owner_id, a.kind): a for a in Account.objects.raw(_SELECT_USER_ACCOUNTS, [asset.id, owners, kinds])}

    found = fetch()
    missing = [pair for pair in wanted if pair not in found]
    if missing:
        Account.objects.bulk_create(
            [Account(kind=kind, asset=asset, owner_id=owner_id) for owner_id, kind in missing], ignore_conflicts=True
        )
        found = fetch()
    accounts = [found[pair] for pair in wanted]
    for account in accounts:
        account.asset = asset
    return accounts


def user_account(user_id: int, asset: Asset, kind: str = AccountKind.USER_AVAILABLE) -> Account:
    """The user's ``user_available`` (default) or ``user_held`` account for ``asset``, created on first use."""
    if kind not in USER_KINDS:
        raise ValueError(f"{kind} is not a user account kind")
    return _user_accounts_get_or_create(asset, [(user_id, kind)])[0]


def user_accounts(user_id: int, asset: Asset) -> tuple[Account, Account]:
    """The user's ``(user_available, user_held)`` accounts for ``asset`` in one query."""
    available, held = _user_accounts_get_or_create(
        asset, [(user_id, AccountKind.USER_AVAILABLE), (user_id, AccountKind.USER_HELD)]
    )
    return available, held


def fee_revenue_shard(idempotency_key: str) -> int:
    """The ``fee_revenue`` shard (0 to ``settings.LEDGER_FEE_REVENUE_SHARDS - 1``) that credits the entry
    ``idempotency_key``: CRC-32 of the key, so a replayed entry names the same account."""
    return zlib.crc32(idempotency_key.encode()) % settings.LEDGER_FEE_REVENUE_SHARDS


def system_account(kind: str, asset: Asset, *, shard_key: str = "") -> Account:
    """The system account of ``kind`` for ``asset``.

    ``fee_revenue`` is split into ``settings.LEDGER_FEE_REVENUE_SHARDS`` shards so that
    concurrent fills do not queue on one row; the shard is chosen from ``shard_key``
    (pass the entry's idempotency key) so a replayed entry names the same account.
    """
    if kind in USER_KINDS:
        raise ValueError(f"{kind} is a user account kind")
    shard = 0
    if kind == AccountKind.FEE_REVENUE:
        shard = fee_revenue_shard(shard_key)
    params = [kind, asset.id, shard]
    account = next(iter(Account.objects.raw(_SELECT_SYSTEM_ACCOUNT, params)), None)
    if account is None:
        Account.objects.bulk_create([Account(kind=kind, asset=asset, shard=shard)], ignore_conflicts=True)
        account = next(iter(Account.objects.raw(_SELECT_SYSTEM_ACCOUNT, params)))
    account.asset = asset
    return account


_LOCK_ACCOUNTS = "SELECT id FROM ledger_account WHERE id = ANY(%s::bigint[]) ORDER BY id FOR NO KEY UPDATE"


def accounts_lock(account_ids: Collection[int]) -> None:
    """Lock the accounts ``account_ids`` (``FOR NO KEY UPDATE``, held to commit) in id order, in one statement, inside
    the caller's transaction.

    For a transaction that posts several entries in separate calls: each call locks its own accounts in id order,
    but across calls they are locked in the order of the calls, so a transaction taking account 7 in its first call
    and account 3 in its second can deadlock with one that takes 3, then 7 (a sequencer's batch locks all of its
    accounts at once). Locking every account the transaction may post to first keeps it in the one global order
    (DESIGN.md section 6); the later calls re-lock rows it holds. Raises ``TransactionManagementError`` outside a
    transaction.
    """
    if not connection.in_atomic_block:
        raise TransactionManagementError("accounts_lock must run inside transaction.atomic()")
    with connection.cursor() as cursor:
        cursor.execute(_LOCK_ACCOUNTS, [sorted(set(account_ids))])


# The entry point -----------------------------------------------------------------------------------

_SELECT_ACCOUNTS = """
    SELECT a.id, a.kind, a.asset_id, a.owner_id, a.balance, s.code, s.decimals
    FROM ledger_account a JOIN ledger_asset s ON s.id = a.asset_id
    WHERE a.id = ANY(%s::bigint[])
    ORDER BY a.id
"""

# One round trip for a whole batch: the function (migration 0009) locks, checks and writes.
_POST_ENTRIES = """
    SELECT entry_index, entry_id, status, account_id, account_kind, asset_code, decimals, balance_before, balance_after
    FROM ledger_post_entries_v2(
        %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::bigint[], %s::timestamptz,
        %s::int[], %s::bigint[], %s::numeric[], %s::int
    )
"""
# The text and integer arrays travel in binary (%b): psycopg dumps them about four times faster than as text, where
# every element is searched for characters to quote. The amounts stay text (%s): binary numeric is no faster.


_REASONS = frozenset(EntryReason.values)  # Choices.values builds its list anew on every access


@dataclass
class _LockedAccount:
    id: int
    kind: str
    asset_id: int
    owner_id: int | None
    balance: Decimal
    asset_code: str
    decimals: int


def _check_leg_shapes(legs: Sequence[Leg]) -> None:
    if len(legs) < 2:
        raise UnbalancedEntry("A journal entry needs at least two legs.")
    for leg in legs:
        if not isinstance(leg.amount, Decimal) or not leg.amount.is_finite() or leg.amount == 0:
            raise InvalidAmount(f"Leg amounts must be finite non-zero Decimals, got {leg.amount!r}.")


def _check_balanced(legs: Sequence[Leg], accounts: dict[int, "_LockedAccount"]) -> None:
    """Invariant 1 in code: known accounts, exact amounts, zero sum per asset."""
    unknown = {leg.account_id for leg in legs} - accounts.keys()
    if unknown:
        raise NotFound(f"Unknown accounts {sorted(unknown)}.")
    per_asset: dict[int, Decimal] = defaultdict(Decimal)
    asset_of: dict[int, _LockedAccount] = {}
    for leg in legs:
        account = accounts[leg.account_id]
        if not is_exact(leg.amount, account.decimals):
            raise InvalidAmount(f"{leg.amount} has more than {account.decimals} decimals for {account.asset_code}.")
        per_asset[account.asset_id] += leg.amount
        asset_of[account.asset_id] = account
    off = [
        f"{asset_of[asset_id].asset_code} {'debits exceed credits' if total > 0 else 'credits exceed debits'} by "
        f"{format_amount(abs(total), asset_of[asset_id].decimals)}"
        for asset_id, total in per_asset.items()
        if total
    ]
    if off:
        raise UnbalancedEntry(f"Journal entry legs must sum to zero per asset: {'; '.join(off)}.")


def legs_validate(legs: Sequence[Leg]) -> None:
    """Check ``legs`` as :func:`entry_post` would, without locking or writing (for drafts).

    Raises :class:`UnbalancedEntry`, :class:`InvalidAmount` or :class:`NotFound` (unknown account).
    """
    _check_leg_shapes(legs)
    with connection.cursor() as cursor:
        cursor.execute(_SELECT_ACCOUNTS, [sorted({leg.account_id for leg in legs})])
        _check_balanced(legs, {row[0]: _LockedAccount(*row) for row in cursor.fetchall()})


def _payload_hash(reason: str, reference_type: str, reference_id: str, legs: Sequence[Leg]) -> str:
    payload = {
        "reason": reason,
        "reference": [reference_type, reference_id],
        "legs": sorted([leg.account_id, format(leg.amount.normalize(), "f")] for leg in legs),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class EntryRequest:
    """One journal entry for :func:`entries_post`: the arguments :func:`entry_post` takes, as a value."""

    idempotency_key: str
    reason: str
    legs: Sequence[Leg]
    reference_type: str = ""
    reference_id: str = ""
    metadata: dict | None = None
    created_by_id: int | None = None


def _conflict(idempotency_key: str) -> IdempotencyConflict:
    return IdempotencyConflict(f"Idempotency key {idempotency_key!r} was already used with a different payload.")


def _failure(entry: EntryRequest, row: tuple) -> DomainError:
    """The error of ``entry``, which ``ledger_post_entries_v2`` refused with the failure ``row``."""
    _, _, status, _, kind, asset_code, decimals, before, after = row
    if status == "conflict":
        return _conflict(entry.idempotency_key)
    if status == "too_large":
        return InvalidAmount(f"The {asset_code} {kind} balance would reach 10^20 or more.")
    if status == "insufficient":
        return InsufficientFunds(
            f"Insufficient {asset_code}: {format_amount(before, decimals)} "
            f"{'available' if kind == AccountKind.USER_AVAILABLE else 'held'}, "
            f"{format_amount(before - after, decimals)} needed."
        )
    # "invalid": unknown account, inexact amount or unbalanced legs; the read names which, in the words it always has.
    legs_validate(entry.legs)
    raise RuntimeError(f"journal entry {entry.idempotency_key!r} was refused as {status!r} yet its legs check out")


def entries_post(entries: Sequence[EntryRequest]) -> list[JournalEntry]:
    """Post ``entries`` in order inside the caller's transaction, in one round trip for the whole batch.

    Each entry is checked as :func:`entry_post` checks one, against the balances the entries
    before it leave (an account touched by several entries chains its ``balance_after``), and
    a key already posted with the same payload returns the original entry (also a key repeated
    within the batch). Every account of the batch is locked once, in id order, by the
    PostgreSQL function ``ledger_post_entries_v2`` (migration 0009; v1, 0004), which then writes all new
    entries, their postings and the new balances with one statement each.

    The first entry that fails raises its error (the classes and messages of
    :func:`entry_post`) and nothing of the batch is written: the caller's transaction stays
    usable. Returns the entries in the order given (replays as stored, with their original
    ``created_at``). Raises ``OperationalError`` (SQLSTATE 40001, retried by
    :func:`~apps.ledger.transactions.retrying_atomic`) if another transaction posted one of
    the batch's keys between the check and the write.
    """
    posted = _Batch.of(entries).post()
    journal_entries = _entries_of(posted.sent, posted.rows, posted.created_at)
    return [journal_entries[posted.position[entry.idempotency_key]] for entry in entries]


def entry_ids_post(entries: Sequence[EntryRequest]) -> list[int]:
    """:func:`entries_post` for a caller that needs only the entries' ids: the same checks, writes, errors and
    replays, and the ids in the order given, without building (or reading, for a replay) a :class:`JournalEntry`."""
    return _Batch.of(entries).post().entry_ids(entries)


class PostedIds:
    """The outcome of :func:`entry_ids_posting` once its block has ended: :meth:`ids`."""

    def __init__(self, batch: "_Batch"):
        self._batch = batch
        self._posted: _Posted | None = None

    def ids(self) -> list[int]:
        """The entries' ids in the order given (as :func:`entry_ids_post`). Raises ``RuntimeError`` if called inside
        the block (nothing read yet)."""
        if self._posted is None:
            raise RuntimeError("the posting is read when the entry_ids_posting block ends")
        return self._posted.entry_ids(self._batch.entries)


@contextmanager
def entry_ids_posting(entries: Sequence[EntryRequest]) -> Iterator[PostedIds]:
    """:func:`entry_ids_post` overlapped with the caller's own work: the posting call is sent when the block starts
    and read when it ends (psycopg pipeline mode), so the Python in the block runs while PostgreSQL posts.

        with entry_ids_posting(requests) as posting:
            ...  # build the statements that do not need the ids
        ids = posting.ids()

    The same checks, writes, replays and errors as :func:`entry_ids_post`: the first refusal (its classes and
    messages) and any database error are raised when the block ends, and nothing of the batch is written (so run
    no statement in the block that depends on the entries). Raises ``ValueError`` (unknown reason) and
    ``TransactionManagementError`` (no transaction) at once.
    """
    batch = _Batch.of(entries)
    posted = PostedIds(batch)
    if not batch.sent:
        yield posted
        posted._posted = batch.checked([])
        return
    with PreparedCursor() as cursor, connection.wrap_database_errors, connection.connection.pipeline():
        cursor.execute(_POST_ENTRIES, batch.params())  # sent now; PostgreSQL runs it while the block runs
        yield posted
        rows = cursor.fetchall()
    posted._posted = batch.checked(rows)


@dataclass(frozen=True)
class _Posted:
    """What :meth:`_Batch.post` sent (the distinct requests with their payload hashes, and each key's index among
    them) and the posting function's success rows (one per distinct request, in order)."""

    sent: list[tuple[EntryRequest, str]]
    position: dict[str, int]
    rows: list[tuple]
    created_at: datetime

    def entry_ids(self, entries: Sequence[EntryRequest]) -> list[int]:
        """The ids of ``entries`` (the requests posted, in any order, repeats included)."""
        ids = [entry_id for _, entry_id, *_ in self.rows]
        return [ids[self.position[entry.idempotency_key]] for entry in entries]


@dataclass
class _Batch:
    """``entries`` checked as far as Python checks them: the distinct requests (``sent``, with their payload
    hashes), each key's index among them, and the refusal found here (``stop``: the batch fails there at the
    latest)."""

    entries: Sequence[EntryRequest]
    sent: list[tuple[EntryRequest, str]]
    position: dict[str, int]
    stop: DomainError | None
    created_at: datetime

    @classmethod
    def of(cls, entries: Sequence[EntryRequest]) -> "_Batch":
        if not connection.in_atomic_block:
            raise TransactionManagementError("entry_post must run inside transaction.atomic()")
        sent: list[tuple[EntryRequest, str]] = []
        position: dict[str, int] = {}
        stop: DomainError | None = None
        for entry in entries:
            if entry.reason not in _REASONS:
                raise ValueError(f"unknown entry reason {entry.reason!r}")
            try:
                _check_leg_shapes(entry.legs)
            except DomainError as exc:
                stop = exc
                break
            payload_hash = _payload_hash(entry.reason, entry.reference_type, entry.reference_id, entry.legs)
            seen = position.get(entry.idempotency_key)
            if seen is None:
                position[entry.idempotency_key] = len(sent)
                sent.append((entry, payload_hash))
            elif sent[seen][1] != payload_hash:
                stop = _conflict(entry.idempotency_key)
                break
        return cls(entries, sent, position, stop, timezone.now())

    def params(self) -> list:
        """The parameters of :data:`_POST_ENTRIES` (arrays as literals: :func:`~apps.ledger.db.array_literal`)."""
        sent = self.sent
        legs = [(ordinal, leg) for ordinal, (entry, _) in enumerate(sent, start=1) for leg in entry.legs]
        return [
            array_literal(entry.idempotency_key for entry, _ in sent),
            array_literal(entry.reason for entry, _ in sent),
            array_literal(entry.reference_type for entry, _ in sent),
            array_literal(entry.reference_id for entry, _ in sent),
            array_literal(json.dumps(entry.metadata or {}, default=str) for entry, _ in sent),
            array_literal(payload_hash for _, payload_hash in sent),
            array_literal(entry.created_by_id for entry, _ in sent),
            self.created_at,
            array_literal(ordinal for ordinal, _ in legs),
            array_literal(leg.account_id for _, leg in legs),
            array_literal(leg.amount for _, leg in legs),
            len(sent) + 1 if self.stop is not None else None,
        ]

    def post(self) -> _Posted:
        """Post the batch (one round trip); raise the first refusal."""
        if not self.sent:
            return self.checked([])
        with PreparedCursor() as cursor:
            cursor.execute(_POST_ENTRIES, self.params())
            return self.checked(cursor.fetchall())

    def checked(self, rows: list[tuple]) -> _Posted:
        """The batch as posted, from the posting function's ``rows`` (none when nothing was sent); raises the
        first refusal, the posting function's or the one found here."""
        if not rows or (rows[0][2] == "stop" and self.stop is not None):
            if self.stop is not None:
                raise self.stop
        elif rows[0][2] not in ("posted", "replayed"):
            raise _failure(self.sent[rows[0][0] - 1][0], rows[0])
        return _Posted(self.sent, self.position, rows, self.created_at)


def _entries_of(sent: Sequence[tuple[EntryRequest, str]], rows: Sequence[tuple], created_at) -> list[JournalEntry]:
    """The journal entries of the ``(request, payload hash)`` pairs ``sent``, from the posting function's
    success ``rows`` (one per request, in order): new ones built in memory, replays read as stored."""
    replayed_ids = [row[1] for row in rows if row[2] == "replayed"]
    replayed = JournalEntry.objects.in_bulk(replayed_ids) if replayed_ids else {}  # no queryset built for none
    return [
        replayed[entry_id]
        if status == "replayed"
        else JournalEntry(
            id=entry_id,
            idempotency_key=entry.idempotency_key,
            reason=entry.reason,
            reference_type=entry.reference_type,
            reference_id=entry.reference_id,
            metadata=entry.metadata or {},
            payload_hash=payload_hash,
            created_at=created_at,
            created_by_id=entry.created_by_id,
        )
        for (entry, payload_hash), (_, entry_id, status, *_) in zip(sent, rows, strict=True)
    ]


def entry_post(
    *,
    idempotency_key: str,
    reason: str,
    legs: Sequence[Leg],
    reference_type: str = "",
    reference_id: str = "",
    metadata: dict | None = None,
    created_by_id: int | None = None,
) -> JournalEntry:
    """Post one balanced journal entry, or return the one already posted under ``idempotency_key``.

    Runs inside the caller's ``transaction.atomic()`` (the caller owns retries, see
    :func:`~apps.ledger.transactions.retrying_atomic`). One round trip: the PostgreSQL
    function ``ledger_post_entries_v2`` (see :func:`entries_post`) locks every account the
    legs touch in primary-key order (``FOR NO KEY UPDATE``), checks the entry, then writes
    the entry, its postings (each with the account's balance after it) and the new
    balances. Nothing is written when it raises.

    ``legs``: two or more, each a non-zero exact multiple of its account's asset
    precision, summing to zero per asset. ``reason`` is an :class:`EntryReason`.
    ``metadata`` is stored as JSON and not part of the idempotency comparison, which
    covers reason, reference and legs.

    Raises :class:`UnbalancedEntry`, :class:`InvalidAmount` (also when a balance would
    reach 10^20, beyond ``NUMERIC(38, 18)``), :class:`NotFound` (unknown account),
    :class:`InsufficientFunds` (a user account would go below zero: invariant 3) and
    :class:`IdempotencyConflict` (the key was used with another payload: invariant 7).
    """
    request = EntryRequest(
        idempotency_key=idempotency_key,
        reason=reason,
        legs=legs,
        reference_type=reference_type,
        reference_id=reference_id,
        metadata=metadata,
        created_by_id=created_by_id,
    )
    return entries_post([request])[0]


def hold_legs(*, available_id: int, held_id: int, amount: Decimal) -> list[Leg]:
    """The legs of a hold of ``amount`` (positive): Dr the user's available, Cr the user's held (section 4)."""
    return [Leg(available_id, amount), Leg(held_id, -amount)]


def release_legs(*, held_id: int, available_id: int, amount: Decimal) -> list[Leg]:
    """The legs of a release of ``amount`` (positive): Dr the user's held, Cr the user's available (section 4)."""
    return [Leg(held_id, amount), Leg(available_id, -amount)]


# Recipes that need no other app (DESIGN.md section 4) ----------------------------------------------


@retrying_atomic
def funds_hold(
    *,
    user_id: int,
    asset: Asset,
    amount: Decimal,
    idempotency_key: str,
    reason: str = EntryReason.HOLD,
    reference_type: str = "",
    reference_id: str = "",
) -> JournalEntry:
    """Move ``amount`` of ``asset`` from the user's available to held funds (Dr available, Cr held).

    Used for orders (``order:<id>:hold``) and withdrawals (``withdrawal:<id>:hold``).
    Raises :class:`InsufficientFunds` when available is short, :class:`InvalidAmount`
    for an amount that is not positive or has more decimals than the asset allows.
    """
    amount = check_amount(amount, decimals=asset.decimals)
    available, held = user_accounts(user_id, asset)
    return entry_post(
        idempotency_key=idempotency_key,
        reason=reason,
        legs=hold_legs(available_id=available.id, held_id=held.id, amount=amount),
        reference_type=reference_type,
        reference_id=reference_id,
    )


@retrying_atomic
def funds_release(
    *,
    user_id: int,
    asset: Asset,
    amount: Decimal,
    idempotency_key: str,
    reason: str = EntryReason.RELEASE,
    reference_type: str = "",
    reference_id: str = "",
) -> JournalEntry:
    """Move ``amount`` of ``asset`` from the user's held back to available funds (Dr held, Cr available).

    Raises :class:`InsufficientFunds` if less than ``amount`` is held (a bug in the
    caller: holds are released exactly once), :class:`InvalidAmount` as for a hold.
    """
    amount = check_amount(amount, decimals=asset.decimals)
    available, held = user_accounts(user_id, asset)
    return entry_post(
        idempotency_key=idempotency_key,
        reason=reason,
        legs=release_legs(held_id=held.id, available_id=available.id, amount=amount),
        reference_type=reference_type,
        reference_id=reference_id,
    )


def _asset_of(code: str) -> Asset:
    try:
        return Asset.objects.get(code=code)
    except Asset.DoesNotExist:
        raise InvalidAmount(f"Unknown asset {code}.", field="asset") from None


_POST_TRANSFER = """
    SELECT entry_index, entry_id, status, account_id, account_kind, asset_code, decimals, balance_before, balance_after,
           payload_hash
    FROM ledger_transfer_post_v2(
        %s::text, %s::text, %s::bigint, %s::bigint, %s::numeric, %s::numeric, %s::int, %s::text[], %s::text, %s::text,
        %s::text, %s::text, %s::bigint, %s::timestamptz, %s::boolean
    )
"""


def _plain(value: Decimal, *, allow_zero: bool = False) -> bool:
    """Whether ``value`` passes every check of :func:`check_amount` that does not depend on the asset."""
    if not isinstance(value, Decimal) or not value.is_finite() or value < 0 or (value == 0 and not allow_zero):
        return False
    exponent = value.as_tuple().exponent
    return isinstance(exponent, int) and exponent >= -AMOUNT_DECIMAL_PLACES and fits(value)


def _amount_text(amount: Decimal) -> str:
    """A leg's amount as the payload hash writes it (see :func:`_payload_hash`)."""
    return format(amount.normalize(), "f")


@dataclass(frozen=True)
class _Transfer:
    """What :func:`transfer_create` was asked, as its three ways of posting it take it."""

    key: str
    code: str
    source_user_id: int
    destination_user_id: int
    value: Decimal
    fee: Decimal
    reference_id: str
    created_by_id: int | None

    @property
    def plain(self) -> bool:
        """Whether both amounts pass every check that does not depend on the asset (the one-round-trip path)."""
        return _plain(self.value) and _plain(self.fee, allow_zero=True)


def _transfer_post(transfer: _Transfer, *, create_accounts: bool) -> JournalEntry | None:
    """Post the transfer in ONE round trip (``ledger_transfer_post_v2``, migration 0008: asset, accounts and the
    payload hash resolved in the database, which then locks, checks and writes the one entry as
    ``ledger_post_entries_v2`` would, in fewer statements). Inside a transaction, with its BEGIN
    in the same pipeline when it was not sent yet; in autocommit the statement is the whole transaction (so
    ``create_accounts`` must be False there: a refused transfer leaves no new account behind).

    Returns ``None`` when the asset is unknown, an amount is finer than its precision or (``create_accounts``
    False) an account does not exist yet, with nothing written: :func:`transfer_create` then goes the long way,
    which words each error as it always has. Raises what :func:`entry_post` raises for the entry."""
    key, reference_id, value, fee = transfer.key, transfer.reference_id, transfer.value, transfer.fee
    shard = fee_revenue_shard(key)
    # The payload's JSON text around its legs (the first "null" is the legs' value: "legs" sorts first).
    head, _, tail = json.dumps(
        {"legs": None, "reason": EntryReason.TRANSFER.value, "reference": ["transfer", reference_id]}, sort_keys=True
    ).partition("null")
    created_at = timezone.now()
    texts = array_literal([_amount_text(value + fee), _amount_text(-value), _amount_text(-fee) if fee else ""])
    params = [
        key, transfer.code, transfer.source_user_id, transfer.destination_user_id, value, fee, shard, texts,
        reference_id, "{}", head, tail, transfer.created_by_id, created_at, create_accounts,
    ]  # fmt: skip
    with PreparedCursor() as cursor:
        if cursor.connection.in_atomic_block:
            (rows,) = cursor.pipeline([(_POST_TRANSFER, params)])
        else:
            cursor.execute(_POST_TRANSFER, params)
            rows = cursor.fetchall()
    status = rows[0][2]
    if status in ("unknown_asset", "inexact", "invalid", "missing_accounts"):
        return None
    request = EntryRequest(
        idempotency_key=key,
        reason=EntryReason.TRANSFER,
        legs=(),
        reference_type="transfer",
        reference_id=reference_id,
        created_by_id=transfer.created_by_id,
    )
    if status not in ("posted", "replayed"):
        raise _failure(request, rows[0][:9])
    return _entries_of([(request, rows[0][9])], rows, created_at)[0]


def transfer_create(
    *,
    source_user_id: int,
    destination_user_id: int,
    amount: Money,
    transfer_id: str,
    fee: Decimal = Decimal(0),
    created_by_id: int | None = None,
) -> JournalEntry:
    """Move ``amount`` from one user's available funds to another's (key ``transfer:<transfer_id>``).

    ``amount`` is a ``Money`` in an asset code; it must be positive and within the
    asset's precision. A positive ``fee`` (same asset) is charged to the source on top
    of ``amount`` and credited to ``fee_revenue``. Posting the same ``transfer_id``
    again returns the original entry.
    Raises :class:`InsufficientFunds`, :class:`InvalidAmount`, :class:`IdempotencyConflict`.

    Called outside a transaction, the transfer is one statement that is its own transaction
    (one round trip, BEGIN and COMMIT included, so a hot account's lock is held for no client
    round trip); when that cannot do (an account to create first, an error to word, a deadlock)
    it runs as a retried transaction (``retrying_atomic``). Inside the caller's transaction it
    runs in a savepoint of it.
    """
    if source_user_id == destination_user_id:
        raise DomainError("Source and destination must differ.", fields={"destination": "Must differ from the source."})
    transfer = _Transfer(
        key=f"transfer:{transfer_id}",
        code=amount.currency.code,
        source_user_id=source_user_id,
        destination_user_id=destination_user_id,
        value=amount.amount,
        fee=fee,
        reference_id=str(transfer_id),
        created_by_id=created_by_id,
    )
    if not connection.in_atomic_block and transfer.plain:
        try:
            entry = _transfer_post(transfer, create_accounts=False)
        except OperationalError as exc:
            if not is_retryable(exc):
                raise
            entry = None  # the statement was rolled back; the retried transaction below posts it
        if entry is not None:
            return entry
    return _transfer_create_atomic(transfer)


@retrying_atomic
def _transfer_create_atomic(transfer: _Transfer) -> JournalEntry:
    """:func:`transfer_create` in a transaction: one round trip when the amounts look plain, else (or when the
    function refuses to word an error) the lookups, checks and :func:`entry_post` of old."""
    if transfer.plain:
        entry = _transfer_post(transfer, create_accounts=True)
        if entry is not None:
            return entry
    # An unknown asset or an amount the asset cannot hold: refused below, in the words it always had.
    key = transfer.key
    asset = _asset_of(transfer.code)
    value = check_amount(transfer.value, decimals=asset.decimals)
    fee = check_amount(transfer.fee, decimals=asset.decimals, field="fee", allow_zero=True)
    source, destination = _user_accounts_get_or_create(
        asset,
        [
            (transfer.source_user_id, AccountKind.USER_AVAILABLE),
            (transfer.destination_user_id, AccountKind.USER_AVAILABLE),
        ],
    )
    legs = [debit(source, value + fee), credit(destination, value)]
    if fee:
        legs.append(credit(system_account(AccountKind.FEE_REVENUE, asset, shard_key=key), fee))
    return entry_post(
        idempotency_key=key,
        reason=EntryReason.TRANSFER,
        legs=legs,
        reference_type="transfer",
        reference_id=transfer.reference_id,
        created_by_id=transfer.created_by_id,
    )


def adjustment_legs_validate(legs: Sequence[Leg]) -> None:
    """Check a manual adjustment's legs: balanced and exact (as :func:`legs_validate`), one on ``equity``,
    none on ``user_held`` (held funds belong to open orders and pending withdrawals: invariant 4), each account
    named once (two legs on one account were approved and posted as an entry that moved nothing: break-it review).

    Raises :class:`UnbalancedEntry`, :class:`InvalidAmount`, :class:`NotFound`, :class:`DomainError`
    (field ``legs``).
    """
    legs_validate(legs)
    if len({leg.account_id for leg in legs}) < len(legs):
        message = "Each account takes one leg: combine the legs on the same account."
        raise DomainError(message, fields={"legs": message})
    kinds = set(Account.objects.filter(id__in=[leg.account_id for leg in legs]).values_list("kind", flat=True))
    if AccountKind.EQUITY not in kinds:
        raise UnbalancedEntry("A manual adjustment needs an equity leg.", fields={"legs": "Add an equity leg."})
    if AccountKind.USER_HELD in kinds:
        message = "Held funds belong to open orders and pending withdrawals: adjust available funds instead."
        raise DomainError(message, fields={"legs": message})


@retrying_atomic
def adjustment_post(*, adjustment_id: str, legs: Sequence[Leg], memo: str, operator_id: int) -> JournalEntry:
    """Post a manual adjustment: balanced ``legs``, one of them on an ``equity`` account, none on held funds.

    ``memo`` (required) says why; ``operator_id`` is the operator who approved it and is
    recorded as the entry's author. Key ``adjustment:<adjustment_id>``.
    Raises what :func:`adjustment_legs_validate` raises, :class:`DomainError` (memo) and
    :class:`InsufficientFunds` if a user account would go negative.
    """
    memo = reason_checked(memo, field="memo")
    adjustment_legs_validate(legs)
    return entry_post(
        idempotency_key=f"adjustment:{adjustment_id}",
        reason=EntryReason.ADJUSTMENT,
        legs=legs,
        reference_type="adjustment",
        reference_id=str(adjustment_id),
        metadata={"memo": memo},
        created_by_id=operator_id,
    )
