"""Every write to the ledger: the only code that creates journal rows or changes a balance.

The core is :func:`entry_post` (DESIGN.md section 6). The recipe services below it
(hold, release, transfer, adjustment) build balanced legs and call it inside a
transaction that retries on deadlock (:func:`apps.ledger.transactions.retrying_atomic`).
Other apps call these services; they never write ledger models themselves.
"""

import hashlib
import json
import zlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import connection
from django.db.transaction import TransactionManagementError
from django.utils import timezone
from moneyed import Money

from apps.core.errors import DomainError, NotFound

from .amounts import check_amount, fits, format_amount, is_exact
from .db import PreparedCursor
from .errors import IdempotencyConflict, InsufficientFunds, InvalidAmount, UnbalancedEntry
from .models import (
    USER_KINDS,
    Account,
    AccountKind,
    Asset,
    EntryReason,
    JournalEntry,
    normal_sign,
)
from .transactions import retrying_atomic


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
        shard = zlib.crc32(shard_key.encode()) % settings.LEDGER_FEE_REVENUE_SHARDS
    params = [kind, asset.id, shard]
    account = next(iter(Account.objects.raw(_SELECT_SYSTEM_ACCOUNT, params)), None)
    if account is None:
        Account.objects.bulk_create([Account(kind=kind, asset=asset, shard=shard)], ignore_conflicts=True)
        account = next(iter(Account.objects.raw(_SELECT_SYSTEM_ACCOUNT, params)))
    account.asset = asset
    return account


# The entry point -----------------------------------------------------------------------------------

_SELECT_ACCOUNTS = """
    SELECT a.id, a.kind, a.asset_id, a.owner_id, a.balance, s.code, s.decimals
    FROM ledger_account a JOIN ledger_asset s ON s.id = a.asset_id
    WHERE a.id = ANY(%s::bigint[])
    ORDER BY a.id
"""
_LOCK_ACCOUNTS = _SELECT_ACCOUNTS + "FOR NO KEY UPDATE OF a"

# The entry, its postings and the new balances in one round trip. On a replayed key the
# INSERT returns no row, so no posting is written and no balance changes.
_WRITE_ENTRY = """
    WITH entry AS (
        INSERT INTO ledger_journalentry
            (idempotency_key, reason, reference_type, reference_id, metadata, payload_hash, created_at, created_by_id)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (idempotency_key) DO NOTHING
        RETURNING id
    ), postings AS (
        INSERT INTO ledger_posting (entry_id, account_id, asset_id, amount, balance_after)
        SELECT entry.id, p.account_id, p.asset_id, p.amount, p.balance_after
        FROM entry, unnest(%s::bigint[], %s::bigint[], %s::numeric[], %s::numeric[])
            AS p(account_id, asset_id, amount, balance_after)
    ), balances AS (
        UPDATE ledger_account a
        SET balance = v.balance, version = a.version + v.postings
        FROM entry, unnest(%s::bigint[], %s::numeric[], %s::int[]) AS v(id, balance, postings)
        WHERE a.id = v.id
    )
    SELECT id FROM entry
"""


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


def _replayed_entry(idempotency_key: str, payload_hash: str) -> JournalEntry | None:
    """The entry already posted under ``idempotency_key``, if any; a different payload is a conflict."""
    entry = JournalEntry.objects.filter(idempotency_key=idempotency_key).first()
    if entry is not None and entry.payload_hash != payload_hash:
        raise IdempotencyConflict(f"Idempotency key {idempotency_key!r} was already used with a different payload.")
    return entry


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
    :func:`~apps.ledger.transactions.retrying_atomic`). It locks every account the legs
    touch in primary-key order with one ``SELECT ... FOR NO KEY UPDATE``, checks the
    entry, then writes the entry, its postings (each with the account's balance after
    it) and the new balances: one statement each. Nothing is written when it raises.

    ``legs``: two or more, each a non-zero exact multiple of its account's asset
    precision, summing to zero per asset. ``reason`` is an :class:`EntryReason`.
    ``metadata`` is stored as JSON and not part of the idempotency comparison, which
    covers reason, reference and legs.

    Raises :class:`UnbalancedEntry`, :class:`InvalidAmount` (also when a balance would
    reach 10^20, beyond ``NUMERIC(38, 18)``), :class:`InsufficientFunds` (a user account
    would go below zero: invariant 3) and :class:`IdempotencyConflict` (the key was used
    with another payload: invariant 7).
    """
    if not connection.in_atomic_block:
        raise TransactionManagementError("entry_post must run inside transaction.atomic()")
    if reason not in EntryReason.values:
        raise ValueError(f"unknown entry reason {reason!r}")
    _check_leg_shapes(legs)
    payload_hash = _payload_hash(reason, reference_type, reference_id, legs)

    with PreparedCursor() as cursor:
        cursor.execute(_LOCK_ACCOUNTS, [sorted({leg.account_id for leg in legs})])
        accounts = {row[0]: _LockedAccount(*row) for row in cursor.fetchall()}
        _check_balanced(legs, accounts)

        balances = {account_id: account.balance for account_id, account in accounts.items()}
        balances_after = []
        for leg in legs:
            account = accounts[leg.account_id]
            balances[leg.account_id] += normal_sign(account.kind) * leg.amount
            balances_after.append(balances[leg.account_id])

        short = [a for a in accounts.values() if a.kind in USER_KINDS and balances[a.id] < 0]
        too_large = [a for a in accounts.values() if not fits(balances[a.id])]
        if short or too_large:
            replayed = _replayed_entry(idempotency_key, payload_hash)
            if replayed is not None:
                return replayed
            if too_large:
                raise InvalidAmount(
                    f"The {too_large[0].asset_code} {too_large[0].kind} balance would reach 10^20 or more."
                )
            account = short[0]
            needed = account.balance - balances[account.id]
            raise InsufficientFunds(
                f"Insufficient {account.asset_code}: {format_amount(account.balance, account.decimals)} "
                f"{'available' if account.kind == AccountKind.USER_AVAILABLE else 'held'}, "
                f"{format_amount(needed, account.decimals)} needed."
            )

        created_at = timezone.now()
        touched = Counter(leg.account_id for leg in legs)
        cursor.execute(
            _WRITE_ENTRY,
            [
                idempotency_key,
                reason,
                reference_type,
                reference_id,
                json.dumps(metadata or {}, default=str),
                payload_hash,
                created_at,
                created_by_id,
                [leg.account_id for leg in legs],
                [accounts[leg.account_id].asset_id for leg in legs],
                [leg.amount for leg in legs],
                balances_after,
                list(touched),
                [balances[account_id] for account_id in touched],
                list(touched.values()),
            ],
        )
        inserted = cursor.fetchone()
        if inserted is None:  # the key was taken (ON CONFLICT DO NOTHING): a replay, or a conflict
            replayed = _replayed_entry(idempotency_key, payload_hash)
            if replayed is None:
                raise RuntimeError(f"journal entry {idempotency_key!r} conflicted yet cannot be read")
            return replayed
        entry_id = inserted[0]

    return JournalEntry(
        id=entry_id,
        idempotency_key=idempotency_key,
        reason=reason,
        reference_type=reference_type,
        reference_id=reference_id,
        metadata=metadata or {},
        payload_hash=payload_hash,
        created_at=created_at,
        created_by_id=created_by_id,
    )


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


def entries_post(entries: Sequence[EntryRequest]) -> list[JournalEntry]:
    """Post ``entries`` in order inside the caller's transaction: one call for a batch of entries.

    Each entry is checked and written as :func:`entry_post` does (a replayed key returns
    the entry already posted). The first entry that fails raises its error; entries
    before it are then written in the caller's transaction, which the error ends.
    Returns the entries in the order given.
    """
    return [
        entry_post(
            idempotency_key=entry.idempotency_key,
            reason=entry.reason,
            legs=entry.legs,
            reference_type=entry.reference_type,
            reference_id=entry.reference_id,
            metadata=entry.metadata,
            created_by_id=entry.created_by_id,
        )
        for entry in entries
    ]


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


def _asset_of(amount: Money) -> Asset:
    try:
        return Asset.objects.get(code=amount.currency.code)
    except Asset.DoesNotExist:
        raise InvalidAmount(f"Unknown asset {amount.currency.code}.", field="asset") from None


@retrying_atomic
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
    """
    if source_user_id == destination_user_id:
        raise DomainError("Source and destination must differ.", fields={"destination": "Must differ from the source."})
    asset = _asset_of(amount)
    value = check_amount(amount.amount, decimals=asset.decimals)
    fee = check_amount(fee, decimals=asset.decimals, field="fee", allow_zero=True)
    key = f"transfer:{transfer_id}"
    source, destination = _user_accounts_get_or_create(
        asset, [(source_user_id, AccountKind.USER_AVAILABLE), (destination_user_id, AccountKind.USER_AVAILABLE)]
    )
    legs = [debit(source, value + fee), credit(destination, value)]
    if fee:
        legs.append(credit(system_account(AccountKind.FEE_REVENUE, asset, shard_key=key), fee))
    return entry_post(
        idempotency_key=key,
        reason=EntryReason.TRANSFER,
        legs=legs,
        reference_type="transfer",
        reference_id=str(transfer_id),
        created_by_id=created_by_id,
    )


def adjustment_legs_validate(legs: Sequence[Leg]) -> None:
    """Check a manual adjustment's legs: balanced and exact (as :func:`legs_validate`), one on ``equity``,
    none on ``user_held`` (held funds belong to open orders and pending withdrawals: invariant 4).

    Raises :class:`UnbalancedEntry`, :class:`InvalidAmount`, :class:`NotFound`, :class:`DomainError`
    (field ``legs``).
    """
    legs_validate(legs)
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
    if not memo.strip():
        raise DomainError("A reason is required.", fields={"memo": "A reason is required."})
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
