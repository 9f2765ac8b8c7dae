"""Every write of the wallets: deposit addresses, the custody inbox, deposits and withdrawals.

Money moves only through :mod:`apps.ledger.services`, with the posting recipes and keys of
DESIGN.md section 4. Each state change is guarded in the database: an ``UPDATE ... WHERE
status IN (...)`` (or a row lock, then a check) inside the transaction that posts the
entry, so a double click, two operators or a duplicate task change nothing the second time.
Calls to the custody provider and Celery tasks happen outside transactions that hold locks
(tasks are queued with ``transaction.on_commit``).

Amounts are ``Decimal`` in units of the asset, exact multiples of its precision.
"""

import enum
import hashlib
import json
import logging
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import cast

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.urls import reverse
from django.utils import timezone

from apps.accounts.errors import WithdrawalsBlocked, WithdrawalsOnHold
from apps.accounts.notifications import email_user_on_commit, site_url
from apps.accounts.restrictions import account_withdrawals_block_by_system
from apps.accounts.selectors import withdrawal_hold, withdrawals_blocked
from apps.core.addresses import address_validate
from apps.core.errors import (
    DomainError,
    InvalidAddress,
    InvalidState,
    NotFound,
    PermissionDenied,
    object_without_duplicates,
)
from apps.core.reasons import reason_checked
from apps.core.session_lock import session_advisory_lock
from apps.ledger.amounts import check_amount, format_amount, parse_amount
from apps.ledger.errors import IdempotencyConflict, InsufficientFunds, InvalidAmount
from apps.ledger.models import Account, AccountKind, Asset, EntryReason
from apps.ledger.selectors import available_balance
from apps.ledger.services import (
    EntryRequest,
    accounts_lock,
    credit,
    debit,
    entries_post,
    entry_post,
    funds_hold,
    funds_release,
    system_account,
    user_account,
    user_accounts,
)
from apps.ledger.transactions import retrying_atomic

from . import queueing, selectors
from .address_book import AddressNotAllowed, own_deposit_address, withdrawal_address_require_active
from .custody import get_adapter
from .custody.base import CustodyRejected, CustodyUnavailable
from .errors import (
    UNKNOWN_ASSET,
    CreditedDepositFailed,
    EventNotReady,
    EventRejected,
    WithdrawalLimit,
    unknown_asset_message,
)
from .events import transfer_changed
from .links import link_token_make, link_token_read
from .models import (
    EVENT_STATUSES,
    WITHDRAWAL_CANCELLABLE,
    CustodyEvent,
    CustodyEventStatus,
    Deposit,
    DepositAddress,
    DepositStatus,
    EventState,
    EventType,
    Withdrawal,
    WithdrawalStatus,
)

log = logging.getLogger(__name__)

APPROVE_PERMISSION = "wallets.approve_withdrawal"
DAILY_WINDOW = timedelta(hours=24)
MAX_TXID_LENGTH = 128
TXID = re.compile(r"[A-Za-z0-9._-]{1,128}")  # a transaction id: its ledger keys end with ":<vout>"
MAX_COUNT = 2**31 - 1
INTERNAL_TXID_PREFIX = "internal-"
"""The transaction ids of transfers between our own customers (:func:`_withdrawal_settle_internally`): a reported
one is refused (break-it review: a deposit reported as ``internal-23`` took the id withdrawal 23's internal
settlement needed, and that withdrawal failed at every retry with its funds held)."""


def txid_problem(value: str) -> str | None:
    """Why ``value`` cannot be a transaction id reported by custody (or typed in ``simulate_deposit``), or None."""
    if not TXID.fullmatch(value):
        return "Must be letters, digits, '.', '_' or '-'."
    if value.startswith(INTERNAL_TXID_PREFIX):
        return f"Transaction ids starting with {INTERNAL_TXID_PREFIX!r} are reserved for transfers between customers."
    return None


# Deposit addresses -------------------------------------------------------------------------------


def deposit_address_get_or_create(*, user_id: int, asset: Asset) -> DepositAddress:
    """The user's deposit address for ``asset``, asking the custody provider for one the first time.

    Call it outside a transaction: it may call the provider. Concurrent first calls for one user and asset wait for
    each other (a session advisory lock, held across the provider's call and released however it ends), so the
    provider is asked once (break-it review: 20 concurrent first requests had it hand out 10 addresses nobody
    kept; a real provider may charge for each). Raises
    :class:`~apps.wallets.custody.base.CustodyUnavailable` / ``CustodyRejected`` from the provider.
    """
    existing = selectors.deposit_address_for_user(user_id=user_id, asset_id=asset.id)
    if existing is not None:
        return existing
    with session_advisory_lock(f"deposit_address:{user_id}:{asset.id}"):
        existing = selectors.deposit_address_for_user(user_id=user_id, asset_id=asset.id)
        if existing is not None:
            return existing
        address = get_adapter().new_deposit_address(
            network=asset.network, asset_code=asset.code, label=f"user:{user_id}"
        )
        return DepositAddress.objects.create(user_id=user_id, asset=asset, network=asset.network, address=address)


# The custody inbox ---------------------------------------------------------------------------------


def _text(data: dict, name: str, errors: dict, *, required: bool, max_length: int) -> str:
    value = data.get(name)
    if value is None:
        if required:
            errors[name] = "This field is required."
        return ""
    if not isinstance(value, str) or not value or len(value) > max_length or not value.isprintable():
        errors[name] = f"Must be a non-empty string of at most {max_length} printable characters."
        return ""
    return value


def _txid(value: str, errors: dict, field: str = "txid") -> str:
    problem = txid_problem(value) if value else None
    if problem:
        errors[field] = problem
    return value


def _count(data: dict, name: str, errors: dict) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        errors[name] = f"Must be a whole number from 0 to {MAX_COUNT}."
        return None
    return value


def _amount(data: dict, name: str, errors: dict, asset: Asset | None, *, required: bool) -> Decimal | None:
    value = data.get(name)
    if value is None:
        if required:
            errors[name] = "This field is required."
        return None
    if asset is None:
        return None
    try:
        return parse_amount(value, decimals=asset.decimals, field=name, allow_zero=not required)
    except InvalidAmount as exc:
        errors.update(exc.fields)
        return None


def _event_fields(body: bytes) -> dict:
    """Validate a callback body (API.md "Custody webhook"); return the inbox row's fields.

    Raises :class:`DomainError` (400) naming every malformed field, and
    :class:`~apps.core.errors.DuplicateField` (400 ``duplicate_field``) for a field given twice.
    """
    try:
        data = json.loads(body, object_pairs_hook=object_without_duplicates)  # a field twice: DuplicateField
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise DomainError("The body must be a JSON object.", fields={"body": "Not valid JSON."}) from None
    if not isinstance(data, dict):
        raise DomainError("The body must be a JSON object.", fields={"body": "Not a JSON object."})
    errors: dict[str, str] = {}
    event_id = _text(data, "event_id", errors, required=True, max_length=200)
    kind = data.get("type")
    if kind not in EventType.values:
        errors["type"] = 'Must be "deposit" or "withdrawal".'
    status = data.get("status")
    if kind in EVENT_STATUSES and status not in EVENT_STATUSES[kind]:
        errors["status"] = "Must be one of " + ", ".join(EVENT_STATUSES[kind]) + "."
    code = _text(data, "asset", errors, required=True, max_length=10)
    asset = Asset.objects.filter(code=code).first() if code else None
    if code and asset is None:
        errors["asset"] = "Unknown asset."
    fields = {
        "event_id": event_id,
        "type": kind,
        "status": status,
        "asset": asset,
        "amount": _amount(data, "amount", errors, asset, required=True),
        "txid": _txid(
            _text(
                data,
                "txid",
                errors,
                required=kind == EventType.DEPOSIT or status == CustodyEventStatus.COMPLETED,
                max_length=MAX_TXID_LENGTH,
            ),
            errors,
        ),
        "confirmations": _count(data, "confirmations", errors),
        "address": _text(data, "address", errors, required=kind == EventType.DEPOSIT, max_length=128),
    }
    if kind == EventType.DEPOSIT:
        fields["vout"] = _count(data, "vout", errors)
        if fields["vout"] is None and "vout" not in errors:
            fields["vout"] = 0
        if asset is not None and fields["address"]:
            try:
                address_validate(network=asset.network, address=fields["address"])
            except InvalidAddress as exc:
                errors.update(exc.fields)
    if kind == EventType.WITHDRAWAL:
        fields["network_fee"] = _amount(data, "network_fee", errors, asset, required=False)
        raw_id = data.get("withdrawal_id")
        if isinstance(raw_id, str) and raw_id.isascii() and raw_id.isdigit() and len(raw_id) < 19:
            raw_id = int(raw_id)
        if raw_id is None:
            errors["withdrawal_id"] = "This field is required."
        elif isinstance(raw_id, bool) or not isinstance(raw_id, int) or not 0 < raw_id < 2**63:
            errors["withdrawal_id"] = "Must be a withdrawal id."
        elif not Withdrawal.objects.filter(pk=raw_id).exists():
            errors["withdrawal_id"] = "Unknown withdrawal."
        else:
            fields["withdrawal_id"] = raw_id
    if errors:
        raise DomainError("Malformed custody callback.", fields=errors)
    fields["body_hash"] = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    return fields


def _event_insert(event: CustodyEvent) -> bool:
    """Insert ``event`` unless its ``event_id`` is stored already, in ONE statement (``INSERT ... ON CONFLICT
    (event_id) DO NOTHING RETURNING id``, column list from the model); return whether it was inserted (its
    ``pk`` set). No savepoint is needed around it: a duplicate raises nothing."""
    fields = [field for field in CustodyEvent._meta.concrete_fields if not field.primary_key]
    columns = [field.column for field in fields if field.column is not None]
    values = [field.get_db_prep_save(field.pre_save(event, add=True), connection) for field in fields]
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(CustodyEvent._meta.db_table)} ({', '.join(quote(column) for column in columns)}) "  # noqa: S608 (names from _meta)
            f"VALUES ({', '.join(['%s'] * len(fields))}) ON CONFLICT ({quote('event_id')}) DO NOTHING RETURNING id",
            values,
        )
        row = cursor.fetchone()
    if row is None:
        return False
    event.pk = row[0]
    event._state.adding = False
    return True


def custody_event_receive(*, body: bytes) -> tuple[CustodyEvent, bool]:
    """Store a custody callback's (already authenticated) ``body`` in the inbox; return ``(event, created)``.

    The event is committed when this returns (one ``INSERT`` statement, its own transaction; inside a
    caller's transaction, with it), and a drain of the inbox is queued on commit
    (:func:`apps.wallets.queueing.inbox_drain_wake`: at most one per second, a running drain
    picks the event up). The same ``event_id`` again with the same content returns the stored
    event (``created`` False) and queues nothing. Raises :class:`DomainError` (400) for a malformed
    body and :class:`IdempotencyConflict` for a known ``event_id`` with other content; nothing is
    stored then.
    """
    fields = _event_fields(body)
    event = CustodyEvent(body=body.decode("utf-8", errors="replace"), **fields)
    if not _event_insert(event):
        existing = CustodyEvent.objects.get(event_id=fields["event_id"])  # events are never deleted
        if existing.body_hash != fields["body_hash"]:
            raise IdempotencyConflict(f"Custody event {fields['event_id']!r} was already received with other content.")
        return existing, False
    transaction.on_commit(queueing.inbox_drain_wake, robust=True)
    return event, True


def _event_outcome(event: CustodyEvent) -> tuple[str, str]:
    """Apply one received event whose row this transaction has locked, in a savepoint; return its new
    ``(state, error)``. A report that can never apply is ``rejected`` with the reason (its writes undone);
    :class:`EventNotReady` propagates, with nothing written."""
    try:
        with transaction.atomic():
            if event.type == EventType.DEPOSIT:
                _deposit_event_apply(event)
            else:
                _withdrawal_event_apply(event)
    except (EventRejected, DomainError) as exc:  # a report that can never apply waits for an operator
        _reported_failed_after_credit(exc)  # after the savepoint's rollback: the block stays
        error = getattr(exc, "message", str(exc))
        log.error("custody event %s rejected: %s", event.event_id, error)
        return EventState.REJECTED, error
    return EventState.PROCESSED, ""


def _reported_failed_after_credit(exc: Exception) -> None:
    """For :class:`CreditedDepositFailed`, block the owner's withdrawals in the event's transaction (break-it review:
    a credited deposit reported failed stayed spendable, and the owner withdrew it); nothing for another refusal."""
    if isinstance(exc, CreditedDepositFailed):
        account_withdrawals_block_by_system(
            user_id=exc.user_id,
            reason=f"Deposit #{exc.deposit_id} was credited and custody now reports it failed: reverse the credit "
            "by hand (an adjustment), then lift this block.",
        )


def _events_mark(outcomes: dict[int, tuple[str, str]]) -> None:
    """Record the outcome of received events this transaction has locked: ``{event pk: (state, error)}``."""
    now = timezone.now()
    processed = [pk for pk, (state, _error) in outcomes.items() if state == EventState.PROCESSED]
    if processed:
        CustodyEvent.objects.filter(pk__in=processed, state=EventState.RECEIVED).update(
            state=EventState.PROCESSED, error="", processed_at=now
        )
    for pk, (state, error) in outcomes.items():
        if state == EventState.REJECTED:
            CustodyEvent.objects.filter(pk=pk, state=EventState.RECEIVED).update(
                state=state, error=error, processed_at=now
            )


@retrying_atomic
def custody_event_process(*, event_pk: int) -> CustodyEvent:
    """Apply one inbox event and mark it processed, in one transaction; a processed event is left alone.

    A deposit report records the deposit (unique on network, txid, vout) and credits it once
    it has the asset's confirmations (:func:`deposit_credit`). A withdrawal report completes
    or fails the submitted withdrawal. A report that can never apply (unknown address, a
    contradiction) marks the event ``rejected`` with the reason, for an operator. Workers
    apply events in batches (:func:`custody_events_process_batch`), with the same outcomes.

    Raises :class:`EventNotReady` (nothing written) for a withdrawal outcome that arrives before
    its submission was recorded: the caller retries later. Raises :class:`NotFound` for an
    unknown event. Keeps invariant 8 (credited once; completed or released once).
    """
    event = (
        CustodyEvent.objects.select_for_update(of=("self",), no_key=True)
        .select_related("asset")
        .filter(pk=event_pk)
        .first()
    )
    if event is None:
        raise NotFound(f"Unknown custody event {event_pk}.")
    if event.state != EventState.RECEIVED:
        return event
    event.state, event.error = _event_outcome(event)
    _events_mark({event.pk: (event.state, event.error)})
    return event


@dataclass(frozen=True)
class InboxBatch:
    """What one :func:`custody_events_process_batch` did: the pks of the events it claimed, by outcome."""

    processed: tuple[int, ...] = ()
    rejected: tuple[int, ...] = ()
    deferred: tuple[int, ...] = ()  # not ready yet (EventNotReady): still received, nothing written

    @property
    def claimed(self) -> int:
        """How many received events the batch locked."""
        return len(self.processed) + len(self.rejected) + len(self.deferred)

    @property
    def applied(self) -> int:
        """How many events it marked processed or rejected."""
        return len(self.processed) + len(self.rejected)


@retrying_atomic
def custody_events_process_batch(*, limit: int, exclude: Collection[int] = ()) -> InboxBatch:
    """Apply up to ``limit`` received inbox events (oldest first, none of the pks in ``exclude``) in ONE
    transaction, with the outcomes :func:`custody_event_process` gives each of them.

    The events are claimed with ``SELECT ... FOR NO KEY UPDATE SKIP LOCKED``: two workers take
    disjoint batches instead of queueing on each other, and an event is applied exactly once (it
    is marked in the transaction that applies it; invariant 8). The deposit reports are applied
    set-based (:func:`_deposit_events_apply`): one statement to find their addresses, one to
    record new deposits, one to lock them, ONE :func:`~apps.ledger.services.entries_post` for
    every credit of the batch, one to update the deposits. A report that can never apply is
    rejected on its own; if the set-based step fails as a whole (an error from the ledger, a
    constraint), its work is undone and each deposit report is applied on its own in a
    savepoint, so the others still go through. Withdrawal reports are applied one by one in
    savepoints; one not ready yet (:class:`EventNotReady`) is left received and returned in
    ``deferred``. A batch that posts in several calls (withdrawal reports, or deposit reports one by one) first locks
    every account it may post to, in id order (:func:`~apps.ledger.services.accounts_lock`), so it cannot deadlock
    with a sequencer's batch, which locks its accounts at once. Deadlocks retry the whole batch.
    """
    events = list(
        CustodyEvent.objects.select_for_update(of=("self",), no_key=True, skip_locked=True)
        .select_related("asset")
        .filter(state=EventState.RECEIVED)
        .exclude(pk__in=list(exclude))
        .order_by("id")[:limit]
    )
    deposit_events = [event for event in events if event.type == EventType.DEPOSIT]
    outcomes: dict[int, tuple[str, str]] = {}
    deferred: list[int] = []
    if len(deposit_events) < len(events):  # withdrawal reports post one by one: lock what they all may touch first
        accounts_lock(_events_accounts(events))
    if deposit_events:
        try:
            with transaction.atomic():
                outcomes.update(_deposit_events_apply(deposit_events))
        except (DomainError, IntegrityError) as exc:
            log.warning("batch of %d deposit reports applied one by one: %s", len(deposit_events), exc)
            accounts_lock(_events_accounts(deposit_events))
            for event in deposit_events:
                outcomes[event.pk] = _event_outcome(event)
    for event in events:
        if event.type == EventType.WITHDRAWAL:
            try:
                outcomes[event.pk] = _event_outcome(event)
            except EventNotReady:
                deferred.append(event.pk)
    _events_mark(outcomes)
    return InboxBatch(
        processed=tuple(pk for pk, (state, _error) in outcomes.items() if state == EventState.PROCESSED),
        rejected=tuple(pk for pk, (state, _error) in outcomes.items() if state == EventState.REJECTED),
        deferred=tuple(deferred),
    )


def _events_accounts(events: Sequence[CustodyEvent]) -> set[int]:
    """Every ledger account applying ``events`` may post to (created if missing): its user's available and held and
    its asset's custody and network fee expense, once each however many events name them, and the fee revenue shard
    of each withdrawal's completion. For :func:`~apps.ledger.services.accounts_lock` before a batch that posts in
    several calls."""
    assets: dict[int, Asset] = {}
    users: set[tuple[int, int]] = set()  # (user id, asset id)
    fee_keys: set[tuple[int, str]] = set()  # (asset id, entry key)
    addresses = _deposit_addresses([event for event in events if event.type == EventType.DEPOSIT])
    for event in events:
        address = addresses.get((event.asset.network, event.address)) if event.type == EventType.DEPOSIT else None
        if address is not None and address.asset_id == event.asset_id:
            assets[event.asset_id] = event.asset
            users.add((address.user_id, event.asset_id))
    withdrawal_ids = [e.withdrawal_id for e in events if e.type == EventType.WITHDRAWAL and e.withdrawal_id is not None]
    for withdrawal in Withdrawal.objects.select_related("asset").filter(pk__in=withdrawal_ids):
        assets[withdrawal.asset_id] = withdrawal.asset
        users.add((withdrawal.user_id, withdrawal.asset_id))
        fee_keys.add((withdrawal.asset_id, withdrawal.key("complete")))
    ids = {account.id for user_id, asset_id in users for account in user_accounts(user_id, assets[asset_id])}
    for asset in assets.values():
        ids |= {system_account(kind, asset).id for kind in (AccountKind.CUSTODY, AccountKind.NETWORK_FEE_EXPENSE)}
    ids |= {system_account(AccountKind.FEE_REVENUE, assets[a], shard_key=key).id for a, key in fee_keys}
    return ids


def _deposit_addresses(events: Sequence[CustodyEvent]) -> dict[tuple[str, str], DepositAddress]:
    """Our deposit addresses the reports name, by ``(network, address)``, in one query."""
    found = DepositAddress.objects.select_related("asset").filter(address__in={event.address for event in events})
    return {(address.network, address.address): address for address in found}


def _deposits_locked(outputs: Collection[tuple[str, str, int]]) -> dict[tuple[str, str, int], Deposit]:
    """Lock the deposits of ``outputs`` (``(network, txid, vout)``) in id order, FOR NO KEY UPDATE; by output."""
    networks, txids, vouts = zip(*outputs, strict=True) if outputs else ((), (), ())
    table = connection.ops.quote_name(Deposit._meta.db_table)
    locked = Deposit.objects.raw(
        f"SELECT * FROM {table} WHERE (network, txid, vout) IN "  # noqa: S608 (the table name is the model's)
        "(SELECT * FROM unnest(%s::text[], %s::text[], %s::int[])) ORDER BY id FOR NO KEY UPDATE",
        [list(networks), list(txids), list(vouts)],
    )
    return {(deposit.network, deposit.txid, deposit.vout): deposit for deposit in locked}


def _deposit_events_apply(events: Sequence[CustodyEvent]) -> dict[int, tuple[str, str]]:
    """Apply deposit reports (received, locked by this transaction, in id order) set-based; return each one's
    ``(state, error)``.

    The reports are judged one after another exactly as :func:`_deposit_event_apply` judges them,
    against the deposits as the earlier reports of the batch left them; the writes are then made
    once for the batch. Raises what the ledger raises (:class:`DomainError`) or an
    :class:`IntegrityError`; the caller then undoes it all and applies the reports one by one.
    """
    outcomes: dict[int, tuple[str, str]] = {}
    addresses = _deposit_addresses(events)
    valid: list[tuple[CustodyEvent, DepositAddress]] = []
    for event in events:
        asset = event.asset
        address = addresses.get((asset.network, event.address))
        if address is None:
            outcomes[event.pk] = _rejected(
                event, f"{event.address} is not one of our deposit addresses on {asset.network}."
            )
        elif address.asset_id != asset.id:
            outcomes[event.pk] = _rejected(
                event,
                f"{event.address} is our deposit address for {address.asset.code}; "
                f"the report credits {asset.code} to it.",
            )
        else:
            valid.append((event, address))
    new: dict[tuple[str, str, int], Deposit] = {}
    for event, address in valid:
        output = _event_output(event)
        new.setdefault(
            output,
            Deposit(
                user_id=address.user_id,
                asset=event.asset,
                address=address,
                network=output[0],
                txid=output[1],
                vout=output[2],
                amount=event.amount,
            ),
        )
    Deposit.objects.bulk_create([new[output] for output in sorted(new)], ignore_conflicts=True)
    deposits = _deposits_locked(sorted(new))

    changed: dict[int, Deposit] = {}
    credits: dict[int, Deposit] = {}
    for event, address in valid:
        deposit = deposits[_event_output(event)]
        try:
            _deposit_report_judge(deposit, event, address)
        except EventRejected as exc:
            _reported_failed_after_credit(exc)
            outcomes[event.pk] = _rejected(event, str(exc))
            continue
        outcomes[event.pk] = (EventState.PROCESSED, "")
        deposit.asset = event.asset  # the same asset (judged above), already loaded: no query per deposit
        changed[deposit.pk] = deposit
        if deposit.status == DepositStatus.CREDITED and deposit.entry_id is None:
            credits[deposit.pk] = deposit  # once, however many of the batch's reports name the deposit
    for deposit in changed.values():
        transfer_changed.send(
            sender=Deposit, kind="deposit", user_id=deposit.user_id, object_id=deposit.pk
        )  # published as committed
    _deposit_credits_post(list(credits.values()))
    _deposits_update(list(changed.values()))
    _deposit_credits_email(list(credits.values()))
    return outcomes


_DEPOSIT_UPDATE_FIELDS = ("status", "entry_id", "credited_at", "confirmations")


def _deposits_update(deposits: Sequence[Deposit]) -> None:
    """Write the status, entry, credit time and confirmations of ``deposits`` (locked) in ONE statement, an
    ``UPDATE ... FROM unnest(...)`` (Django's ``bulk_update`` builds a CASE per field and row: slower to build
    in Python than to run); ``updated_at`` becomes now."""
    if not deposits:
        return
    now = timezone.now()
    column_of = {field.attname: field.column for field in Deposit._meta.concrete_fields if field.column is not None}
    columns = [column_of[name] for name in _DEPOSIT_UPDATE_FIELDS]
    quote = connection.ops.quote_name
    table = quote(Deposit._meta.db_table)
    assignments = ", ".join(f"{quote(column)} = v.{quote(column)}" for column in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS d SET {assignments}, {quote('updated_at')} = %s "  # noqa: S608 (names from _meta)
            f"FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::timestamptz[], %s::int[]) "
            f"AS v(id, {', '.join(quote(column) for column in columns)}) WHERE d.id = v.id",
            [
                now,
                [deposit.pk for deposit in deposits],
                *([getattr(deposit, name) for deposit in deposits] for name in _DEPOSIT_UPDATE_FIELDS),
            ],
        )
    for deposit in deposits:
        deposit.updated_at = now


def _event_output(event: CustodyEvent) -> tuple[str, str, int]:
    """The transaction output a deposit report is about: ``(network, txid, vout)`` (a deposit event always has
    a ``vout``: the ``custody_event_fields_match_type`` constraint)."""
    return event.asset.network, event.txid, cast(int, event.vout)


def _rejected(event: CustodyEvent, error: str) -> tuple[str, str]:
    log.error("custody event %s rejected: %s", event.event_id, error)
    return EventState.REJECTED, error


def _deposit_report_judge(deposit: Deposit, event: CustodyEvent, address: DepositAddress) -> None:
    """Apply one report to ``deposit`` in memory (status, confirmations; ``credited_at`` when it is now to be
    credited), or raise why it is rejected (:class:`EventRejected`, :class:`CreditedDepositFailed`). The rules of
    :func:`_deposit_event_apply`."""
    asset = event.asset
    if (deposit.asset_id, deposit.address_id, deposit.amount) != (asset.id, address.id, event.amount):
        raise EventRejected(
            f"The report ({asset.code} {event.amount} to {event.address}) contradicts deposit #{deposit.pk}."
        )
    if event.status == CustodyEventStatus.FAILED:
        if deposit.status == DepositStatus.CREDITED:
            raise CreditedDepositFailed(deposit_id=deposit.pk, user_id=deposit.user_id)
        deposit.status = DepositStatus.FAILED
        return
    if deposit.status == DepositStatus.FAILED:
        raise EventRejected(f"Deposit #{deposit.pk} was reported failed before.")
    confirmations = max(_reported_confirmations(event), deposit.confirmations)
    if deposit.status == DepositStatus.PENDING and confirmations >= asset.confirmations_required:
        deposit.status, deposit.credited_at = DepositStatus.CREDITED, timezone.now()
    deposit.confirmations = confirmations


def _reported_confirmations(event: CustodyEvent) -> int:
    """The confirmations a deposit report gives: a ``confirmed`` report without a count is final in the
    provider's judgement (the asset's confirmations); a ``pending`` one without a count gives none."""
    if event.confirmations is not None:
        return event.confirmations
    return event.asset.confirmations_required if event.status == CustodyEventStatus.CONFIRMED else 0


def _deposit_credit_request(deposit: Deposit, available: Account, custody: Account) -> EntryRequest:
    """The credit of ``deposit``: Dr ``custody`` (the asset's custody account), Cr the user's ``available``
    (its amount), key ``deposit:<network>:<txid>:<vout>`` (DESIGN.md section 4)."""
    return EntryRequest(
        idempotency_key=deposit.idempotency_key,
        reason=EntryReason.DEPOSIT,
        legs=[debit(custody, deposit.amount), credit(available, deposit.amount)],
        reference_type="deposit",
        reference_id=str(deposit.pk),
        metadata={"txid": deposit.txid, "vout": deposit.vout, "address": deposit.address_id},
    )


def _deposit_credits_post(deposits: Sequence[Deposit]) -> None:
    """Post the credits of ``deposits`` (locked, judged credited) with one :func:`entries_post`; set their
    ``entry_id``.

    The entries go in descending order of the user's account id: an entry locks its accounts in id
    order, so a batch whose first entry's user account comes after the custody account locks the
    custody account first and waits holding nothing (two batches then never deadlock on custody).
    """
    if not deposits:
        return
    available: dict[tuple[int, int | None], Account] = {}
    for asset_id in {deposit.asset_id for deposit in deposits}:
        users = {deposit.user_id for deposit in deposits if deposit.asset_id == asset_id}
        for account in Account.objects.filter(kind=AccountKind.USER_AVAILABLE, asset_id=asset_id, owner_id__in=users):
            available[(asset_id, account.owner_id)] = account
    for deposit in deposits:
        if (deposit.asset_id, deposit.user_id) not in available:  # the user's first coins of the asset
            available[(deposit.asset_id, deposit.user_id)] = user_account(deposit.user_id, deposit.asset)
    assets = {deposit.asset_id: deposit.asset for deposit in deposits}
    custody_accounts = {asset_id: system_account(AccountKind.CUSTODY, asset) for asset_id, asset in assets.items()}
    ordered = sorted(deposits, key=lambda deposit: available[(deposit.asset_id, deposit.user_id)].id, reverse=True)
    entries = entries_post(
        [
            _deposit_credit_request(
                deposit, available[(deposit.asset_id, deposit.user_id)], custody_accounts[deposit.asset_id]
            )
            for deposit in ordered
        ]
    )
    for deposit, entry in zip(ordered, entries, strict=True):
        deposit.entry_id = entry.id


def _deposit_credits_email(deposits: Sequence[Deposit]) -> None:
    """Tell each owner with an e-mail address that the deposit was credited (sent on commit)."""
    with_email = set(
        get_user_model()
        .objects.filter(pk__in={deposit.user_id for deposit in deposits})
        .exclude(email="")
        .values_list("pk", flat=True)
    )
    for deposit in deposits:
        if deposit.user_id in with_email:
            _deposit_credited_email(deposit)


def _deposit_event_apply(event: CustodyEvent) -> None:
    asset = event.asset
    address = (
        DepositAddress.objects.select_related("asset").filter(network=asset.network, address=event.address).first()
    )
    if address is None:
        raise EventRejected(f"{event.address} is not one of our deposit addresses on {asset.network}.")
    if address.asset_id != asset.id:
        raise EventRejected(
            f"{event.address} is our deposit address for {address.asset.code}; the report credits {asset.code} to it."
        )
    network, txid, vout = _event_output(event)
    Deposit.objects.bulk_create(
        [
            Deposit(
                user_id=address.user_id,
                asset=asset,
                address=address,
                network=network,
                txid=txid,
                vout=vout,
                amount=event.amount,
            )
        ],
        ignore_conflicts=True,
    )
    deposit = Deposit.objects.select_for_update(of=("self",), no_key=True).get(network=network, txid=txid, vout=vout)
    transfer_changed.send(
        sender=Deposit, kind="deposit", user_id=deposit.user_id, object_id=deposit.pk
    )  # published as committed
    if (deposit.asset_id, deposit.address_id, deposit.amount) != (asset.id, address.id, event.amount):
        raise EventRejected(
            f"The report ({asset.code} {event.amount} to {event.address}) contradicts deposit #{deposit.pk}."
        )
    if event.status == CustodyEventStatus.FAILED:
        if deposit.status == DepositStatus.CREDITED:
            raise CreditedDepositFailed(deposit_id=deposit.pk, user_id=deposit.user_id)
        Deposit.objects.filter(pk=deposit.pk, status=DepositStatus.PENDING).update(
            status=DepositStatus.FAILED, updated_at=timezone.now()
        )
        return
    if deposit.status == DepositStatus.FAILED:
        raise EventRejected(f"Deposit #{deposit.pk} was reported failed before.")
    confirmations = max(_reported_confirmations(event), deposit.confirmations)
    if deposit.status == DepositStatus.PENDING and confirmations >= asset.confirmations_required:
        _deposit_credit_locked(deposit, asset, confirmations=confirmations)
    elif confirmations > deposit.confirmations:
        Deposit.objects.filter(pk=deposit.pk).update(confirmations=confirmations, updated_at=timezone.now())


def _withdrawal_event_apply(event: CustodyEvent) -> None:
    if event.withdrawal_id is None:
        raise EventRejected("A withdrawal report names no withdrawal.")
    withdrawal = Withdrawal.objects.select_for_update(of=("self",), no_key=True).get(pk=event.withdrawal_id)
    if (withdrawal.asset_id, withdrawal.amount) != (event.asset_id, event.amount) or (
        event.address and event.address != withdrawal.address
    ):
        raise EventRejected(f"The report contradicts withdrawal #{withdrawal.pk} (asset, amount or address).")
    if event.status == CustodyEventStatus.PENDING:
        return
    if withdrawal.status == WithdrawalStatus.APPROVED:
        raise EventNotReady(f"Withdrawal #{withdrawal.pk} is not recorded as submitted yet.")
    outcome = WithdrawalStatus.COMPLETED if event.status == CustodyEventStatus.COMPLETED else WithdrawalStatus.FAILED
    if withdrawal.status == outcome:
        if outcome == WithdrawalStatus.COMPLETED and (
            event.txid != withdrawal.txid or (event.network_fee or Decimal(0)) != (withdrawal.network_fee or Decimal(0))
        ):
            raise EventRejected(
                f"Custody reports withdrawal #{withdrawal.pk} completed again with another txid or network fee."
            )
        return  # reported before
    if withdrawal.status != WithdrawalStatus.SUBMITTED:
        raise EventRejected(
            f"Custody reports withdrawal #{withdrawal.pk} {event.status}, but it is {withdrawal.status}."
        )
    if outcome == WithdrawalStatus.COMPLETED:
        withdrawal_complete(withdrawal_id=withdrawal.pk, txid=event.txid, network_fee=event.network_fee or Decimal(0))
    else:
        withdrawal_fail(withdrawal_id=withdrawal.pk, reason="Custody reported the withdrawal failed.")


@retrying_atomic
def custody_events_requeue(*, older_than: timedelta) -> list[int]:
    """The sweep: wake a drain of the inbox when events are still ``received`` ``older_than`` after arrival and
    no transaction is processing them (their rows are not locked); return their ids (at most 1,000).

    A worker killed mid-batch leaves its events received and unlocked (PostgreSQL rolled its
    transaction back when its connection dropped): this finds them and queues one drain (on
    commit), whatever drain messages the dead worker took with it. It marks them ``requeued_at``.
    """
    now = timezone.now()
    ids = list(
        CustodyEvent.objects.select_for_update(of=("self",), no_key=True, skip_locked=True)
        .filter(state=EventState.RECEIVED, received_at__lte=now - older_than)
        .order_by("id")
        .values_list("id", flat=True)[:1000]
    )
    if ids:
        CustodyEvent.objects.filter(pk__in=ids).update(requeued_at=now)
        queueing.task_send_on_commit(queueing.INBOX_DRAIN_TASK)
    return ids


# Deposits ------------------------------------------------------------------------------------------


@retrying_atomic
def deposit_credit(*, deposit_id: int) -> Deposit:
    """Credit a pending deposit that has its asset's confirmations: Dr custody, Cr user available (the amount).

    Key ``deposit:<network>:<txid>:<vout>``. A credited deposit is returned as it is. Raises
    :class:`InvalidState` for a failed deposit or one short of confirmations, :class:`NotFound`.
    Keeps invariant 8: a deposit is credited at most once.
    """
    deposit = (
        Deposit.objects.select_for_update(of=("self",), no_key=True)
        .select_related("asset")
        .filter(pk=deposit_id)
        .first()
    )
    if deposit is None:
        raise NotFound(f"Unknown deposit {deposit_id}.")
    if deposit.status == DepositStatus.CREDITED:
        return deposit
    if deposit.status != DepositStatus.PENDING:
        raise InvalidState(f"Deposit #{deposit.pk} is {deposit.status}; it cannot be credited.")
    asset = deposit.asset
    if deposit.confirmations < asset.confirmations_required:
        raise InvalidState(
            f"Deposit #{deposit.pk} has {deposit.confirmations} of {asset.confirmations_required} confirmations."
        )
    transfer_changed.send(sender=Deposit, kind="deposit", user_id=deposit.user_id, object_id=deposit.pk)
    return _deposit_credit_locked(deposit, asset, confirmations=deposit.confirmations)


def _deposit_credit_locked(deposit: Deposit, asset: Asset, *, confirmations: int) -> Deposit:
    """Post the credit of a pending deposit whose row this transaction has locked; record ``confirmations``."""
    deposit.asset = asset
    custody = system_account(AccountKind.CUSTODY, asset)
    (entry,) = entries_post([_deposit_credit_request(deposit, user_account(deposit.user_id, asset), custody)])
    now = timezone.now()
    Deposit.objects.filter(pk=deposit.pk, status=DepositStatus.PENDING).update(
        status=DepositStatus.CREDITED, entry_id=entry.id, credited_at=now, confirmations=confirmations, updated_at=now
    )
    deposit.status, deposit.entry_id, deposit.credited_at = DepositStatus.CREDITED, entry.id, now
    deposit.confirmations = confirmations
    _deposit_credited_email(deposit)
    return deposit


def _deposit_credited_email(deposit: Deposit) -> None:
    """E-mail the owner that ``deposit`` was credited (on commit)."""
    asset = deposit.asset
    email_user_on_commit(
        user_id=deposit.user_id,
        template="deposit_credited",
        context={"deposit": deposit, "amount": format_amount(deposit.amount, asset.decimals), "asset": asset},
    )


# Withdrawals ---------------------------------------------------------------------------------------


def _lock_user_asset(user_id: int, asset_id: int) -> None:
    """Serialise one user's withdrawal requests in one asset (daily limit, request key) until commit."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"withdrawal:{user_id}:{asset_id}"])


def _transition(
    withdrawal_id: int, *, from_states: tuple[str, ...], to: str, user_id: int | None = None, **fields
) -> Withdrawal:
    """Move the withdrawal from one of ``from_states`` to ``to`` with one guarded UPDATE (which also locks the row).

    Raises :class:`InvalidState` when it is in another state (someone else moved it first), and
    :class:`NotFound` when it does not exist or, with ``user_id``, belongs to someone else.
    """
    query = Withdrawal.objects.filter(pk=withdrawal_id, status__in=from_states)
    if user_id is not None:
        query = query.filter(user_id=user_id)
    if not query.update(status=to, updated_at=timezone.now(), **fields):
        current = Withdrawal.objects.filter(pk=withdrawal_id).values_list("status", "user_id").first()
        if current is None or (user_id is not None and current[1] != user_id):
            raise NotFound(f"Unknown withdrawal {withdrawal_id}.", fields={"withdrawal": "Unknown withdrawal."})
        if current[0] == to:
            raise InvalidState(f"Withdrawal #{withdrawal_id} is already {to}.")
        raise InvalidState(f"Withdrawal #{withdrawal_id} is {current[0]}; it cannot become {to}.")
    withdrawal = Withdrawal.objects.select_related("asset").get(pk=withdrawal_id)
    transfer_changed.send(sender=Withdrawal, kind="withdrawal", user_id=withdrawal.user_id, object_id=withdrawal.pk)
    return withdrawal


def _ended(**fields) -> dict:
    return {"hold_remaining": Decimal(0), "ended_at": timezone.now(), **fields}


def _release(withdrawal: Withdrawal) -> None:
    """Return the whole hold: Dr user held, Cr user available (``amount + fee``), key ``withdrawal:<id>:release``."""
    funds_release(
        user_id=withdrawal.user_id,
        asset=withdrawal.asset,
        amount=withdrawal.total,
        idempotency_key=withdrawal.key("release"),
        reason=EntryReason.WITHDRAWAL_RELEASE,
        reference_type="withdrawal",
        reference_id=str(withdrawal.pk),
    )


def _queue_submission(withdrawal_id: int) -> None:
    queueing.task_send_on_commit(queueing.WITHDRAWAL_SUBMIT_TASK, withdrawal_id)


def _check_funds(*, user_id: int, asset: Asset, amount: Decimal) -> None:
    """Refuse, before the limits are judged, a withdrawal the user cannot pay (``amount`` plus the fee):
    ``insufficient_funds``, the reason the user needs to hear. The hold re-checks under the account lock."""
    available = available_balance(user_id=user_id, asset_id=asset.id)
    needed = amount + asset.withdrawal_fee
    if needed > available:
        message = (
            f"Insufficient funds: {format_amount(available, asset.decimals)} {asset} available, "
            f"{format_amount(needed, asset.decimals)} needed with the fee."
        )
        raise InsufficientFunds(message, fields={"amount": message})


def _withdrawals_allowed(
    user_id: int, *, blocked: str = "Withdrawals are blocked on this account; contact support."
) -> None:
    """Refuse a withdrawal step while an operator blocks the account's withdrawals
    (:class:`~apps.accounts.errors.WithdrawalsBlocked` with the message ``blocked``) or a security change paused
    them (:class:`~apps.accounts.errors.WithdrawalsOnHold`); the block's lock is held until the caller's commit."""
    if withdrawals_blocked(user_id=user_id, until_commit=True):
        raise WithdrawalsBlocked(blocked)
    hold = withdrawal_hold(user_id=user_id)
    if hold is not None:
        raise WithdrawalsOnHold(hold.until)


def withdrawal_request_check(
    *, user_id: int, asset_code: str, amount: str | Decimal, address: str, request_key: str = ""
) -> tuple[Asset, Decimal]:
    """The checks of :func:`withdrawal_request` that need no lock, in its order, with its errors: withdrawals
    allowed, the asset, the amount, the address (valid, not another asset's deposit address, ``active`` in the
    address book), the key's length, the minimum, and the funds as read now (unless ``request_key`` names an earlier
    request: its replay). Returns ``(asset, amount as a Decimal)``; writes nothing.

    Run it before spending the user's one-time code on the request, so that a form refused for a typo does not
    use the code up (break-it reviews: a refused amount, then an amount above the balance, spent it); the funds again
    and the daily limit are checked under the lock, after the code."""
    _withdrawals_allowed(user_id)
    asset = Asset.objects.filter(code=asset_code).first() if isinstance(asset_code, str) else None
    if asset is None:
        raise DomainError(unknown_asset_message(asset_code), fields={"asset": UNKNOWN_ASSET})
    value = parse_amount(amount, decimals=asset.decimals)
    address_validate(network=asset.network, address=address)
    own_deposit_address(asset, address)  # another asset's is refused here
    if len(request_key) > 64:
        raise DomainError("The idempotency key is too long.", fields={"request_key": "At most 64 characters."})
    if value < asset.min_withdrawal:
        minimum = format_amount(asset.min_withdrawal, asset.decimals)
        raise WithdrawalLimit(f"The minimum withdrawal is {minimum} {asset}.")
    withdrawal_address_require_active(user_id=user_id, asset=asset, address=address)
    if not (request_key and Withdrawal.objects.filter(user_id=user_id, request_key=request_key).exists()):
        _check_funds(user_id=user_id, asset=asset, amount=value)  # a read (a replay's funds are held already)
    return asset, value


@retrying_atomic
def withdrawal_request(
    *, user_id: int, asset_code: str, amount: str | Decimal, address: str, request_key: str = ""
) -> Withdrawal:
    """Request a withdrawal of ``amount`` (units of the asset, a plain decimal string or Decimal) to ``address``.

    Checks, in order: the asset exists (field ``asset``); the amount is positive and within the
    asset's precision (``amount``); the address is valid on the asset's network and is not one
    of our deposit addresses for another asset (``address``, ``invalid_address``); the amount is at least ``min_withdrawal`` and, with what the user
    asked to withdraw of this asset in the last 24 hours (released ones excluded), at most
    ``withdrawal_daily_limit`` (``withdrawal_limit``; a limit of 0 allows nothing). Then holds
    ``amount + fee`` (Dr available, Cr held; ``insufficient_funds`` if short) with key
    ``withdrawal:<id>:hold``. The address must be ``active`` in the user's address book for the
    asset (``address_not_allowed``). An amount above the asset's ``WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE``
    waits ``awaiting_confirmation`` for the link e-mailed to the user (:func:`withdrawal_confirm`);
    otherwise it is approved at once and queued for submission while it and the user's withdrawals of the asset
    approved without an operator in the last 24 hours (released ones excluded) add up to at most
    ``withdrawal_auto_approve_limit``, and awaits an operator beyond. A withdrawal to one of our deposit addresses
    (of this asset) is settled at submission as an internal transfer (:func:`withdrawal_submit`).

    ``request_key`` (the client's idempotency key): the same key with the same asset, amount
    and address returns the first withdrawal; with others it raises :class:`IdempotencyConflict`.
    Nothing is written when it raises (also :class:`~apps.accounts.errors.WithdrawalsBlocked`
    when an operator blocked the account's withdrawals, :class:`~apps.accounts.errors.WithdrawalsOnHold` while a
    change of its password, second factor or e-mail address pauses them). Keeps invariants 3 and 4.
    """
    asset, value = withdrawal_request_check(
        user_id=user_id, asset_code=asset_code, amount=amount, address=address, request_key=request_key
    )
    _lock_user_asset(user_id, asset.id)
    if request_key:
        existing = Withdrawal.objects.filter(user_id=user_id, request_key=request_key).first()
        if existing is not None:
            if (existing.asset_id, existing.amount, existing.address) != (asset.id, value, address):
                raise IdempotencyConflict(f"Idempotency key {request_key!r} was used for another withdrawal.")
            return existing
    _check_funds(user_id=user_id, asset=asset, amount=value)
    used = selectors.withdrawn_since(user_id=user_id, asset_id=asset.id, since=timezone.now() - DAILY_WINDOW)
    if used + value > asset.withdrawal_daily_limit:
        left = max(asset.withdrawal_daily_limit - used, Decimal(0))
        raise WithdrawalLimit(
            f"Above the daily limit of {format_amount(asset.withdrawal_daily_limit, asset.decimals)} {asset}: "
            f"{format_amount(left, asset.decimals)} left for the next 24 hours."
        )
    try:
        with transaction.atomic():
            withdrawal = Withdrawal.objects.create(
                user_id=user_id,
                asset=asset,
                network=asset.network,
                address=address,
                amount=value,
                fee=asset.withdrawal_fee,
                hold_remaining=value + asset.withdrawal_fee,
                request_key=request_key,
            )
    except IntegrityError:
        if request_key and Withdrawal.objects.filter(user_id=user_id, request_key=request_key).exists():
            raise IdempotencyConflict(f"Idempotency key {request_key!r} was used for another withdrawal.") from None
        raise
    funds_hold(
        user_id=user_id,
        asset=asset,
        amount=withdrawal.total,
        idempotency_key=withdrawal.key("hold"),
        reason=EntryReason.WITHDRAWAL_HOLD,
        reference_type="withdrawal",
        reference_id=str(withdrawal.pk),
    )
    threshold = _email_confirmation_threshold(asset)
    if threshold is not None and value > threshold:
        withdrawal = _transition(
            withdrawal.pk, from_states=(WithdrawalStatus.REQUESTED,), to=WithdrawalStatus.AWAITING_CONFIRMATION
        )
        _email_confirmation_link(withdrawal)
        return withdrawal
    return _withdrawal_route(withdrawal, from_state=WithdrawalStatus.REQUESTED)


def _withdrawal_route(withdrawal: Withdrawal, *, from_state: str) -> Withdrawal:
    """Approve (and queue for submission) a withdrawal while it and the user's withdrawals of its asset approved
    without an operator in the last 24 hours (released ones excluded) add up to at most the asset's auto-approval
    limit; else hold it for an operator. The limit bounds that total, not each withdrawal: twenty withdrawals at
    the limit would otherwise leave in a day with nobody looking (a stolen key splitting a large one). The caller
    holds the user's withdrawal lock of the asset (:func:`_lock_user_asset`), so the total cannot move meanwhile."""
    since = timezone.now() - DAILY_WINDOW
    approved = selectors.auto_approved_since(user_id=withdrawal.user_id, asset_id=withdrawal.asset_id, since=since)
    if approved + withdrawal.amount <= withdrawal.asset.withdrawal_auto_approve_limit:
        withdrawal = _transition(
            withdrawal.pk, from_states=(from_state,), to=WithdrawalStatus.APPROVED, decided_at=timezone.now()
        )
        _queue_submission(withdrawal.pk)
        return withdrawal
    return _transition(withdrawal.pk, from_states=(from_state,), to=WithdrawalStatus.AWAITING_APPROVAL)


WITHDRAWAL_LINK_PURPOSE = "withdrawal"


def _email_confirmation_threshold(asset: Asset) -> Decimal | None:
    """The amount above which a withdrawal of ``asset`` needs an e-mail confirmation (units of the asset), or None."""
    threshold = settings.WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE.get(asset.code)
    return None if threshold is None else Decimal(threshold)


def _email_confirmation_link(withdrawal: Withdrawal) -> None:
    token = link_token_make(purpose=WITHDRAWAL_LINK_PURPOSE, object_id=withdrawal.pk)
    decimals = withdrawal.asset.decimals
    email_user_on_commit(
        user_id=withdrawal.user_id,
        template="withdrawal_confirm",
        context={
            "withdrawal": withdrawal,
            "amount": format_amount(withdrawal.amount, decimals),
            "fee": format_amount(withdrawal.fee, decimals),
            "link": site_url(reverse("web:withdrawal-confirm", args=[token])),
            "minutes": settings.WITHDRAWAL_CONFIRMATION_MAX_AGE // 60,
        },
    )


def withdrawal_link_read(*, token: str) -> int:
    """The withdrawal id an e-mailed confirmation link's ``token`` names (nothing is read from the database or
    written); raises :class:`~apps.wallets.links.InvalidLink` for a bad token or one older than
    ``WITHDRAWAL_CONFIRMATION_MAX_AGE`` seconds."""
    return link_token_read(
        purpose=WITHDRAWAL_LINK_PURPOSE, token=token, max_age=settings.WITHDRAWAL_CONFIRMATION_MAX_AGE
    )


@retrying_atomic
def withdrawal_confirm(*, token: str) -> Withdrawal:
    """Confirm the withdrawal named by an e-mailed link's ``token``: from ``awaiting_confirmation`` it is approved
    (while it and the user's last 24 hours of withdrawals of the asset approved without an operator stay within its
    auto-approval limit, and queued for submission) or awaits an operator.

    Single-use and state-guarded: raises :class:`InvalidState` once it was confirmed, cancelled or
    expired, :class:`~apps.wallets.links.InvalidLink` for a bad token or one older than
    ``WITHDRAWAL_CONFIRMATION_MAX_AGE`` seconds, :class:`NotFound`. What :func:`withdrawal_request` checked is
    checked again, since the link may be opened up to that age later: it raises
    :class:`~apps.accounts.errors.WithdrawalsBlocked` while an operator blocks the account's withdrawals,
    :class:`~apps.accounts.errors.WithdrawalsOnHold` while a security change pauses them and
    :class:`~apps.wallets.address_book.AddressNotAllowed` when the address is no longer active in the user's book
    (the withdrawal still awaits confirmation, and expires).
    """
    withdrawal_id = withdrawal_link_read(token=token)
    withdrawal = Withdrawal.objects.select_related("asset").filter(pk=withdrawal_id).first()
    if withdrawal is None:
        raise NotFound(f"Unknown withdrawal {withdrawal_id}.", fields={"token": "Unknown withdrawal."})
    _withdrawals_allowed(withdrawal.user_id)
    _lock_user_asset(withdrawal.user_id, withdrawal.asset_id)
    withdrawal_address_require_active(user_id=withdrawal.user_id, asset=withdrawal.asset, address=withdrawal.address)
    return _withdrawal_route(withdrawal, from_state=WithdrawalStatus.AWAITING_CONFIRMATION)


def _operator_check(*, withdrawal_id: int, operator_id: int) -> int:
    """Refuse an operator who may not decide this withdrawal; return the withdrawal's owner (user id)."""
    operator = get_user_model().objects.filter(pk=operator_id).first()
    if operator is None or not operator.is_active or not operator.has_perm(APPROVE_PERMISSION):
        raise PermissionDenied(f"Approving or rejecting withdrawals needs the {APPROVE_PERMISSION} permission.")
    owner = Withdrawal.objects.filter(pk=withdrawal_id).values_list("user_id", flat=True).first()
    if owner is None:
        raise NotFound(f"Unknown withdrawal {withdrawal_id}.", fields={"withdrawal": "Unknown withdrawal."})
    if owner == operator_id:
        raise PermissionDenied("Operators cannot decide on their own withdrawals.")
    return owner


@retrying_atomic
def withdrawal_approve(*, withdrawal_id: int, operator_id: int) -> Withdrawal:
    """An operator approves a withdrawal awaiting approval; it is queued for submission to custody.

    Raises :class:`PermissionDenied` without ``wallets.approve_withdrawal`` (or for one's own
    withdrawal), :class:`InvalidState` unless it awaits approval (so a second approval is
    refused and submits nothing), :class:`NotFound`, :class:`~apps.accounts.errors.WithdrawalsBlocked`
    while the owner's withdrawals are blocked and :class:`~apps.accounts.errors.WithdrawalsOnHold` while a security
    change of the owner's account pauses them (it can still be rejected either way), :class:`AddressNotAllowed` when
    the address is no longer ``active`` in the owner's address book (removed since the request; break-it review:
    custody sent it).
    """
    owner_id = _operator_check(withdrawal_id=withdrawal_id, operator_id=operator_id)
    _withdrawals_allowed(owner_id, blocked="The customer's withdrawals are blocked: reject it or unblock them first.")
    withdrawal = _transition(
        withdrawal_id,
        from_states=(WithdrawalStatus.AWAITING_APPROVAL,),
        to=WithdrawalStatus.APPROVED,
        decided_by_id=operator_id,
        decided_at=timezone.now(),
    )
    try:  # under the row lock the transition took; the customer may have removed the address since the request
        withdrawal_address_require_active(user_id=owner_id, asset=withdrawal.asset, address=withdrawal.address)
    except AddressNotAllowed:
        raise AddressNotAllowed(
            "The address is no longer active in the customer's address book: reject the withdrawal."
        ) from None
    _queue_submission(withdrawal.pk)
    return withdrawal


@retrying_atomic
def withdrawal_reject(*, withdrawal_id: int, operator_id: int, reason: str) -> Withdrawal:
    """An operator rejects a withdrawal awaiting approval, or one approved that custody does not have (never handed
    over, or custody answered it never received it: ``handed_over`` is false), held back while the account's
    withdrawals are blocked (:func:`withdrawal_submit`); its hold (``amount + fee``) is released once and the user is
    told the ``reason``.

    Raises :class:`PermissionDenied`, :class:`InvalidState` in any other state (also while custody may have it: its
    outcome is custody's), :class:`NotFound`, :class:`DomainError` without a ``reason``. The withdrawal's row is
    locked before it is judged, so a rejection and a submission never both happen. Keeps invariants 4 and 8.
    """
    reason = reason_checked(reason)
    _operator_check(withdrawal_id=withdrawal_id, operator_id=operator_id)
    current = Withdrawal.objects.select_for_update(no_key=True).only("status", "handed_over").get(pk=withdrawal_id)
    if current.status == WithdrawalStatus.APPROVED and current.handed_over:
        raise InvalidState(f"Withdrawal #{withdrawal_id} was handed to custody: it can no longer be rejected.")
    withdrawal = _transition(
        withdrawal_id,
        from_states=(WithdrawalStatus.AWAITING_APPROVAL, WithdrawalStatus.APPROVED),
        to=WithdrawalStatus.REJECTED,
        **_ended(decided_by_id=operator_id, decided_at=timezone.now(), reason=reason, last_error=""),
    )
    _release(withdrawal)
    _email_withdrawal_outcome(withdrawal, template="withdrawal_rejected")
    return withdrawal


def _email_withdrawal_outcome(withdrawal: Withdrawal, *, template: str) -> None:
    """Tell the user their withdrawal was sent (``withdrawal_completed``) or rejected (with the operator's reason,
    when one was given)."""
    decimals = withdrawal.asset.decimals
    email_user_on_commit(
        user_id=withdrawal.user_id,
        template=template,
        context={
            "withdrawal": withdrawal,
            "amount": format_amount(withdrawal.amount, decimals),
            "fee": format_amount(withdrawal.fee, decimals),
            "reason": withdrawal.reason,
        },
    )


@retrying_atomic
def withdrawal_cancel(*, withdrawal_id: int, user_id: int) -> Withdrawal:
    """The user cancels their withdrawal while it is requested, awaiting confirmation or awaiting approval; the hold
    is released once.

    Raises :class:`InvalidState` once it was approved or has ended, :class:`NotFound` for
    someone else's withdrawal. Keeps invariants 4 and 8.
    """
    withdrawal = _transition(
        withdrawal_id,
        from_states=WITHDRAWAL_CANCELLABLE,
        to=WithdrawalStatus.CANCELLED,
        user_id=user_id,
        **_ended(),
    )
    _release(withdrawal)
    return withdrawal


def withdrawal_error_record(*, withdrawal_id: int, error: str) -> None:
    """Record on an approved withdrawal (its ``last_error``, shown to operators, at most 1,000 characters) why its
    submission failed this time: custody not answering, or an error of ours (break-it review: a withdrawal failed at
    every retry and the back office said nothing). Nothing else changes; it stays approved, with its hold."""
    Withdrawal.objects.filter(pk=withdrawal_id, status=WithdrawalStatus.APPROVED).update(
        last_error=error[:1000], updated_at=timezone.now()
    )


def withdrawal_submit(*, withdrawal_id: int) -> Withdrawal:
    """Submit an approved withdrawal to custody, with its id as the custody idempotency key; mark it submitted.

    Call it outside a transaction (the custody call must not hold locks). First, in one transaction
    (:func:`_withdrawal_claim`), it reads the account's withdrawal block under the block's lock and either hands the
    withdrawal over (``submit_attempts`` counts the hand-overs, ``handed_over`` says custody may have it) or settles
    it at once, when it goes to one of our own deposit addresses, as an internal transfer
    (:func:`_withdrawal_settle_internally`). Anything but an approved withdrawal is returned untouched, so a
    duplicate task is harmless.

    While an operator blocks the account's withdrawals (:func:`apps.accounts.restrictions.account_withdrawals_block`)
    nothing new is sent: a withdrawal custody does not have stays approved with its hold, ``last_error`` says why,
    and the sweep (:func:`withdrawals_requeue_submission`) submits it once the block is lifted (or an operator
    rejects it: :func:`withdrawal_reject`). While a security change pauses them (:mod:`apps.accounts.holds`), one
    not handed over yet is held back alike until the pause ends. One handed over before the block, whose answer was
    lost, is finished only if custody has it (:meth:`~apps.wallets.custody.base.CustodyAdapter.withdrawal_status`),
    so its outcome can be recorded; when custody answers it never received it, it is held back like one never sent (and can be rejected).

    When custody does not answer it raises :class:`CustodyUnavailable` and keeps the hold: the caller retries with
    the same id and custody sends it at most once. A definite refusal by custody fails the withdrawal and releases
    its hold, unless custody has an earlier hand-over of it (then it is recorded submitted and custody's report
    decides). Raises :class:`NotFound`.
    """
    withdrawal, submission = _withdrawal_claim(withdrawal_id=withdrawal_id)
    if submission is _Submission.NONE:
        return withdrawal
    adapter = get_adapter()
    if submission is _Submission.IF_AT_CUSTODY and adapter.withdrawal_status(withdrawal_id=str(withdrawal.pk)) is None:
        return _withdrawal_held_back(withdrawal, WITHDRAWALS_BLOCKED_HELD)
    try:
        receipt = adapter.submit_withdrawal(
            withdrawal_id=str(withdrawal.pk),
            network=withdrawal.network,
            asset_code=withdrawal.asset.code,
            amount=withdrawal.amount,
            address=withdrawal.address,
        )
    except CustodyUnavailable as exc:
        withdrawal_error_record(withdrawal_id=withdrawal.pk, error=str(exc))
        raise
    except CustodyRejected as exc:
        earlier = (
            adapter.withdrawal_status(withdrawal_id=str(withdrawal.pk)) if withdrawal.submit_attempts > 1 else None
        )
        if earlier is not None:  # an earlier hand-over reached custody: its outcome comes by callback
            log.warning("withdrawal %s: custody refused a resubmission but has it: %s", withdrawal.pk, exc)
            return _withdrawal_submitted(withdrawal_id=withdrawal.pk, reference=earlier.reference)
        return _withdrawal_refused_by_custody(withdrawal_id=withdrawal.pk, reason=str(exc))
    return _withdrawal_submitted(withdrawal_id=withdrawal.pk, reference=receipt.reference)


class _Submission(enum.Enum):
    """What :func:`withdrawal_submit` does after :func:`_withdrawal_claim`."""

    NONE = "none"  # nothing to send: not approved, held back, settled internally or refused
    SEND = "send"  # handed over to custody in the claim
    IF_AT_CUSTODY = "if_at_custody"  # blocked after a hand-over whose answer was lost: finish it if custody has it


@retrying_atomic
def _withdrawal_claim(*, withdrawal_id: int) -> tuple[Withdrawal, _Submission]:
    """Decide, in one transaction holding the withdrawal's row and the account's block lock shared, whether an
    approved withdrawal goes to custody now; a block committed later waits for this transaction, and a rejection
    (:func:`withdrawal_reject`) for the row. Holds it back, settles it internally, or counts the hand-over."""
    withdrawal = (
        Withdrawal.objects.select_for_update(of=("self",), no_key=True)
        .select_related("asset")
        .filter(pk=withdrawal_id)
        .first()
    )
    if withdrawal is None:
        raise NotFound(f"Unknown withdrawal {withdrawal_id}.")
    if withdrawal.status != WithdrawalStatus.APPROVED:
        return withdrawal, _Submission.NONE
    blocked = withdrawals_blocked(user_id=withdrawal.user_id, until_commit=True)
    if blocked and not withdrawal.handed_over:
        return _withdrawal_held_back(withdrawal, WITHDRAWALS_BLOCKED_HELD), _Submission.NONE
    if not withdrawal.handed_over and withdrawal_hold(user_id=withdrawal.user_id) is not None:
        return _withdrawal_held_back(withdrawal, WITHDRAWALS_PAUSED_HELD), _Submission.NONE
    try:
        recipient = own_deposit_address(withdrawal.asset, withdrawal.address)
    except InvalidAddress as exc:
        return _withdrawal_refused_by_custody(withdrawal_id=withdrawal.pk, reason=exc.message), _Submission.NONE
    if recipient is not None:  # never handed over: an internal transfer is settled in the claim that hands it over
        return _withdrawal_settle_internally(withdrawal_id=withdrawal.pk, recipient=recipient), _Submission.NONE
    if blocked:
        return withdrawal, _Submission.IF_AT_CUSTODY
    withdrawal.submit_attempts += 1
    withdrawal.handed_over = True
    withdrawal.save(update_fields=["submit_attempts", "handed_over", "updated_at"])
    return withdrawal, _Submission.SEND


WITHDRAWALS_BLOCKED_HELD = "Not sent: the account's withdrawals are blocked; it goes out once they are unblocked."
"""The ``last_error`` of an approved withdrawal :func:`withdrawal_submit` holds back while the account is blocked."""
WITHDRAWALS_PAUSED_HELD = (
    "Not sent: the account's withdrawals are paused after a change of its password, second factor or e-mail "
    "address; it goes out once the pause ends."
)
"""The ``last_error`` of an approved withdrawal not yet handed to custody that :func:`withdrawal_submit` holds back
while a security change pauses the account's withdrawals (:mod:`apps.accounts.holds`): one approved, or requested,
before the change. The re-queueing sweep sends it after the pause."""


def _withdrawal_held_back(withdrawal: Withdrawal, why: str) -> Withdrawal:
    """Record on an approved withdrawal of a blocked or paused account ``why`` it was not sent; custody does not have
    it (never handed over, or custody answered it never received it), so it is not ``handed_over`` and an operator
    may reject it. Nothing changes when it was handed over again since ``withdrawal`` was read (its count moved on)."""
    log.warning("withdrawal %s held back: %s", withdrawal.pk, why)
    Withdrawal.objects.filter(
        pk=withdrawal.pk, status=WithdrawalStatus.APPROVED, submit_attempts=withdrawal.submit_attempts
    ).update(last_error=why, handed_over=False, updated_at=timezone.now())
    return Withdrawal.objects.select_related("asset").get(pk=withdrawal.pk)


@retrying_atomic
def _withdrawal_settle_internally(*, withdrawal_id: int, recipient: DepositAddress) -> Withdrawal:
    """Settle an approved withdrawal to our own deposit address ``recipient`` in one transaction, exactly once.

    No custody call and no network fee: the coins never leave custody. The withdrawal is
    submitted and completed with the transaction id ``internal-<id>`` (Dr sender held
    ``amount + fee``; Cr custody ``amount``; Cr fee revenue ``fee``; key ``withdrawal:<id>:complete``),
    and the recipient gets a credited deposit of ``amount`` with that transaction id (Dr custody,
    Cr recipient available; key ``deposit:<network>:internal-<id>:0``). Custody is debited and
    credited the same amount, so it still matches what the provider holds (invariant 5). A
    withdrawal that is no longer approved is returned as it is.
    """
    now = timezone.now()
    claimed = Withdrawal.objects.filter(pk=withdrawal_id, status=WithdrawalStatus.APPROVED).update(
        status=WithdrawalStatus.SUBMITTED,
        submitted_at=now,
        custody_reference="internal",
        last_error="",
        submit_attempts=F("submit_attempts") + 1,
        handed_over=True,
        updated_at=now,
    )
    if not claimed:
        return Withdrawal.objects.select_related("asset").get(pk=withdrawal_id)
    txid = f"{INTERNAL_TXID_PREFIX}{withdrawal_id}"
    withdrawal = withdrawal_complete(withdrawal_id=withdrawal_id, txid=txid)
    asset = withdrawal.asset
    deposit = Deposit.objects.create(
        user_id=recipient.user_id,
        asset=asset,
        address=recipient,
        network=asset.network,
        txid=txid,
        vout=0,
        amount=withdrawal.amount,
        confirmations=asset.confirmations_required,
    )
    _deposit_credit_locked(deposit, asset, confirmations=asset.confirmations_required)
    log.info("withdrawal %s settled internally to deposit %s", withdrawal_id, deposit.pk)
    return withdrawal


@retrying_atomic
def _withdrawal_submitted(*, withdrawal_id: int, reference: str) -> Withdrawal:
    now = timezone.now()
    Withdrawal.objects.filter(pk=withdrawal_id, status=WithdrawalStatus.APPROVED).update(
        status=WithdrawalStatus.SUBMITTED,
        submitted_at=now,
        custody_reference=reference[:128],
        last_error="",
        updated_at=now,
    )
    return Withdrawal.objects.select_related("asset").get(pk=withdrawal_id)


@retrying_atomic
def _withdrawal_refused_by_custody(*, withdrawal_id: int, reason: str) -> Withdrawal:
    now = timezone.now()
    changed = Withdrawal.objects.filter(pk=withdrawal_id, status=WithdrawalStatus.APPROVED).update(
        status=WithdrawalStatus.SUBMITTED,
        submitted_at=now,
        last_error=reason[:1000],
        updated_at=now,
    )
    if not changed:
        return Withdrawal.objects.select_related("asset").get(pk=withdrawal_id)
    return withdrawal_fail(withdrawal_id=withdrawal_id, reason=f"Refused by custody: {reason}")


@retrying_atomic
def withdrawal_complete(*, withdrawal_id: int, txid: str, network_fee: Decimal = Decimal(0)) -> Withdrawal:
    """Custody sent a submitted withdrawal (``txid``): Dr user held ``amount + fee``; Cr custody ``amount``;
    Cr fee revenue ``fee`` (key ``withdrawal:<id>:complete``). A ``network_fee`` (units of the asset)
    custody paid is posted too: Dr network fee expense, Cr custody (key ``withdrawal:<id>:network-fee``).

    Raises :class:`InvalidState` unless it is submitted (a rejected, cancelled, failed or
    completed withdrawal cannot complete), :class:`NotFound`, :class:`DomainError` for a bad
    ``txid`` or ``network_fee``. Keeps invariants 4, 5 and 8.
    """
    if not isinstance(txid, str) or not TXID.fullmatch(txid):
        raise DomainError("A transaction id is required.", fields={"txid": "Letters, digits, '.', '_' or '-'."})
    decimals = Withdrawal.objects.filter(pk=withdrawal_id).values_list("asset__decimals", flat=True).first()
    if decimals is not None:
        network_fee = check_amount(network_fee, decimals=decimals, field="network_fee", allow_zero=True)
    withdrawal = _transition(
        withdrawal_id,
        from_states=(WithdrawalStatus.SUBMITTED,),
        to=WithdrawalStatus.COMPLETED,
        **_ended(txid=txid, network_fee=network_fee),
    )
    asset = withdrawal.asset
    _available, held = user_accounts(withdrawal.user_id, asset)
    custody = system_account(AccountKind.CUSTODY, asset)
    key = withdrawal.key("complete")
    legs = [debit(held, withdrawal.total), credit(custody, withdrawal.amount)]
    if withdrawal.fee:
        legs.append(credit(system_account(AccountKind.FEE_REVENUE, asset, shard_key=key), withdrawal.fee))
    reference_id = str(withdrawal.pk)
    entry_post(
        idempotency_key=key,
        reason=EntryReason.WITHDRAWAL_COMPLETE,
        legs=legs,
        metadata={"txid": txid},
        reference_type="withdrawal",
        reference_id=reference_id,
    )
    if network_fee:
        entry_post(
            idempotency_key=withdrawal.key("network-fee"),
            reason=EntryReason.NETWORK_FEE,
            legs=[
                debit(system_account(AccountKind.NETWORK_FEE_EXPENSE, asset), network_fee),
                credit(custody, network_fee),
            ],
            metadata={"txid": txid},
            reference_type="withdrawal",
            reference_id=reference_id,
        )
    _email_withdrawal_outcome(withdrawal, template="withdrawal_completed")
    return withdrawal


@retrying_atomic
def withdrawal_fail(*, withdrawal_id: int, reason: str) -> Withdrawal:
    """Custody reports a submitted withdrawal failed: it ends ``failed`` and its hold is released once.

    Raises :class:`InvalidState` unless it is submitted, :class:`NotFound`. Keeps invariants 4 and 8.
    """
    withdrawal = _transition(
        withdrawal_id,
        from_states=(WithdrawalStatus.SUBMITTED,),
        to=WithdrawalStatus.FAILED,
        **_ended(reason=reason[:1000]),
    )
    _release(withdrawal)
    return withdrawal


@retrying_atomic
def withdrawals_requeue_submission(*, older_than: timedelta) -> list[int]:
    """Queue the submission of withdrawals approved ``older_than`` ago (and not re-queued since) that are still
    not submitted; return their ids. Submission is idempotent at custody, so this only ever resends."""
    now = timezone.now()
    cutoff = now - older_than
    ids = list(
        Withdrawal.objects.select_for_update(of=("self",), no_key=True, skip_locked=True)
        .filter(status=WithdrawalStatus.APPROVED, decided_at__lte=cutoff)
        .filter(Q(requeued_at__isnull=True) | Q(requeued_at__lte=cutoff))
        .order_by("id")
        .values_list("id", flat=True)[:1000]
    )
    Withdrawal.objects.filter(pk__in=ids).update(requeued_at=now)
    for withdrawal_id in ids:
        _queue_submission(withdrawal_id)
    return ids


@retrying_atomic
def withdrawals_expire_unconfirmed(*, older_than: timedelta) -> list[int]:
    """End withdrawals still ``awaiting_confirmation`` ``older_than`` after their request as ``expired`` and release
    their holds (Dr user held, Cr user available, key ``withdrawal:<id>:release``); return their ids.

    Rows another transaction is changing right now (a confirmation, a cancel) are skipped and
    looked at again by the next sweep. Keeps invariants 4 and 8.
    """
    ids = list(
        Withdrawal.objects.select_for_update(of=("self",), no_key=True, skip_locked=True)
        .filter(status=WithdrawalStatus.AWAITING_CONFIRMATION, created_at__lte=timezone.now() - older_than)
        .order_by("id")
        .values_list("id", flat=True)[:1000]
    )
    for withdrawal_id in ids:
        withdrawal = _transition(
            withdrawal_id,
            from_states=(WithdrawalStatus.AWAITING_CONFIRMATION,),
            to=WithdrawalStatus.EXPIRED,
            **_ended(reason="Not confirmed by e-mail in time."),
        )
        _release(withdrawal)
    return ids
