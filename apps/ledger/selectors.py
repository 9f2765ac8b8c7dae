"""Reads of the ledger: balances (per user, per batch of users) and the user's postings."""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import QuerySet

from .checks import balances_match_postings
from .models import USER_KINDS, Account, AccountKind, Asset, Posting
from .reconciliation import Scope


@dataclass(frozen=True)
class UserBalance:
    """A user's funds in one asset, each an exact amount with ``decimals`` places.

    ``held`` is what open orders and pending withdrawals hold ("on hold"); ``total = available +
    held``. ``display_places`` is how many decimals pages show (:attr:`Asset.display_places`).
    """

    asset: str
    decimals: int
    available: Decimal
    held: Decimal
    display_places: int

    @property
    def total(self) -> Decimal:
        return self.available + self.held


def balances_for_user(user_id: int) -> list[UserBalance]:
    """Every asset's available, held and total for the user (zero where the user has no account), by code."""
    stored = {
        (account.asset_id, account.kind): account.balance
        for account in Account.objects.filter(owner_id=user_id).only("asset_id", "kind", "balance")
    }
    return [
        UserBalance(
            asset=asset.code,
            decimals=asset.decimals,
            available=stored.get((asset.id, AccountKind.USER_AVAILABLE), Decimal(0)).quantize(asset.quantum),
            held=stored.get((asset.id, AccountKind.USER_HELD), Decimal(0)).quantize(asset.quantum),
            display_places=asset.display_places,
        )
        for asset in Asset.objects.order_by("code")
    ]


def available_balance(*, user_id: int, asset_id: int) -> Decimal:
    """What the user can spend of the asset now (their ``user_available`` balance; zero without an account)."""
    balance = (
        Account.objects.filter(owner_id=user_id, asset_id=asset_id, kind=AccountKind.USER_AVAILABLE)
        .values_list("balance", flat=True)
        .first()
    )
    return balance if balance is not None else Decimal(0)


def user_postings(
    user_id: int,
    *,
    asset_code: str | None = None,
    reason: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    before_id: int | None = None,
) -> QuerySet[Posting]:
    """Postings on the user's available and held accounts, newest first.

    Optionally of one asset (``asset_code``), one entry reason (:class:`EntryReason` value),
    entries posted at ``start`` or later and before ``end``, and postings older than the
    posting ``before_id`` (a page's cursor: the id of the last posting shown).
    """
    postings = Posting.objects.filter(account__owner_id=user_id).select_related("entry", "account", "asset")
    if asset_code:
        postings = postings.filter(asset__code=asset_code)
    if reason:
        postings = postings.filter(entry__reason=reason)
    if start is not None:
        postings = postings.filter(entry__created_at__gte=start)
    if end is not None:
        postings = postings.filter(entry__created_at__lt=end)
    if before_id is not None:
        postings = postings.filter(id__lt=before_id)
    return postings.order_by("-id")


def postings_between(*, start: datetime, end: datetime) -> Iterator[Posting]:
    """Every posting of the entries posted at ``start`` or later and before ``end``, by entry then posting id, with
    entry, account (and owner) and asset; read in chunks (for exports: iterate, do not keep)."""
    return (
        Posting.objects.filter(entry__created_at__gte=start, entry__created_at__lt=end)
        .select_related("entry", "account__owner", "asset")
        .order_by("entry_id", "id")
        .iterator(chunk_size=2000)
    )


def balances_for_users(*, user_ids: set[int], asset_ids: set[int]) -> dict[int, list[UserBalance]]:
    """Available and held of each of ``user_ids`` in each of ``asset_ids`` (zero without an account), one query.

    ``{user id: [UserBalance by asset code]}``; the streams publish them after a change.
    """
    assets = list(Asset.objects.filter(id__in=asset_ids).order_by("code"))
    stored = {
        (account.owner_id, account.asset_id, account.kind): account.balance
        for account in Account.objects.filter(
            owner_id__in=user_ids,
            asset_id__in=asset_ids,
            kind__in=(AccountKind.USER_AVAILABLE, AccountKind.USER_HELD),
        ).only("owner_id", "asset_id", "kind", "balance")
    }
    return {
        user_id: [
            UserBalance(
                asset=asset.code,
                decimals=asset.decimals,
                available=stored.get((user_id, asset.id, AccountKind.USER_AVAILABLE), Decimal(0)),
                held=stored.get((user_id, asset.id, AccountKind.USER_HELD), Decimal(0)),
                display_places=asset.display_places,
            )
            for asset in assets
        ]
        for user_id in user_ids
    }


def customer_balances_not_matching_postings() -> list[dict]:
    """Customers' accounts (``user_available``, ``user_held``) whose stored balance differs from the sum of their
    postings (or their last balance-after): reconciliation's invariant 2 check, limited to them, run in the
    caller's transaction (the caller's snapshot). Each row names ``account``, ``kind``, ``owner``, ``asset``,
    ``stored_balance`` and ``postings_balance`` (amount strings); empty when every one matches."""
    scope = Scope(assets=tuple(Asset.objects.order_by("code")), filtered=False)
    return balances_match_postings(scope, kinds=USER_KINDS)
