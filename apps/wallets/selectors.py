"""Reads of the wallets: a user's deposits and withdrawals, the approval queue, holds and limits."""

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal

from django.db.models import Exists, OuterRef, Q, QuerySet, Sum
from django.utils import timezone

from .models import (
    WITHDRAWAL_PENDING,
    WITHDRAWAL_RELEASED,
    CustodyEvent,
    CustodyEventStatus,
    Deposit,
    DepositAddress,
    DepositStatus,
    EventState,
    EventType,
    Withdrawal,
    WithdrawalAddress,
    WithdrawalStatus,
)


def deposit_address_for_user(*, user_id: int, asset_id: int) -> DepositAddress | None:
    """The user's deposit address for the asset, ``None`` before one was handed out."""
    return DepositAddress.objects.filter(user_id=user_id, asset_id=asset_id).first()


def deposits_for_user(*, user_id: int) -> QuerySet[Deposit]:
    """The user's deposits, newest first."""
    return Deposit.objects.filter(user_id=user_id).select_related("asset").order_by("-id")


def withdrawals_for_user(*, user_id: int) -> QuerySet[Withdrawal]:
    """The user's withdrawals, newest first."""
    return Withdrawal.objects.filter(user_id=user_id).select_related("asset").order_by("-id")


def withdrawals_to_decide() -> QuerySet[Withdrawal]:
    """The operators' queue, oldest first: withdrawals awaiting approval, and approved ones held back because the
    account's withdrawals are blocked or paused after a security change (custody does not have them; they can be
    rejected: :func:`apps.wallets.services.withdrawal_reject`)."""
    held_back = Q(status=WithdrawalStatus.APPROVED, handed_over=False) & (
        Q(user__restriction__withdrawals_blocked=True) | Q(user__withdrawal_hold__until__gt=timezone.now())
    )
    return (
        Withdrawal.objects.filter(Q(status=WithdrawalStatus.AWAITING_APPROVAL) | held_back)
        .select_related("asset", "user")
        .order_by("id")
    )


def withdrawn_since(*, user_id: int, asset_id: int, since: datetime) -> Decimal:
    """What the user asked to withdraw of the asset since ``since`` (units of the asset), released ones excluded."""
    total = (
        Withdrawal.objects.filter(user_id=user_id, asset_id=asset_id, created_at__gte=since)
        .exclude(status__in=WITHDRAWAL_RELEASED)
        .aggregate(total=Sum("amount"))["total"]
    )
    return total or Decimal(0)


def auto_approved_since(*, user_id: int, asset_id: int, since: datetime) -> Decimal:
    """What of the asset the user's withdrawals approved without an operator (``decided_by`` empty) since ``since``
    add up to (units of the asset), released ones excluded."""
    total = (
        Withdrawal.objects.filter(user_id=user_id, asset_id=asset_id, decided_at__gte=since, decided_by__isnull=True)
        .exclude(status__in=WITHDRAWAL_RELEASED)
        .aggregate(total=Sum("amount"))["total"]
    )
    return total or Decimal(0)


def withdrawal_holds(*, asset_ids: Iterable[int]) -> dict[tuple[int, int], Decimal]:
    """Remaining holds of pending withdrawals ``{(user id, asset id): amount}`` (a hold source of invariant 4)."""
    rows = (
        Withdrawal.objects.filter(asset_id__in=list(asset_ids), status__in=WITHDRAWAL_PENDING)
        .values("user_id", "asset_id")
        .annotate(held=Sum("hold_remaining"))
    )
    return {(row["user_id"], row["asset_id"]): row["held"] for row in rows}


def withdrawals_at_custody(*, asset_ids: Iterable[int]) -> list[tuple[int, int]]:
    """Pending withdrawals custody may have, ``[(withdrawal id, asset id)]``: handed over (the flag is committed before
    custody is called) and not yet completed or failed in the ledger (invariant 5's in-flight withdrawals)."""
    rows = Withdrawal.objects.filter(asset_id__in=list(asset_ids), status__in=WITHDRAWAL_PENDING, handed_over=True)
    return list(rows.order_by("id").values_list("id", "asset_id"))


def deposits_in_flight(*, asset_ids: Iterable[int]) -> dict[int, Decimal]:
    """Per asset id, what the ledger's custody balance holds of deposits and custody's holdings do not yet, the
    amount of each output once (invariant 5). Custody counts a deposit in its holdings once it reports it
    ``confirmed``; the ledger credits it at the asset's ``confirmations_required``, which may come first:

    - plus each credited deposit custody has reported (its outputs' callbacks are in the inbox) but neither
      ``confirmed`` nor ``failed`` yet (a failed one custody no longer holds, and is left to show as a difference);
    - minus each output custody reported ``confirmed`` whose callback is stored but not processed, and whose deposit
      is not credited (custody counts it, the ledger not yet).

    Internal transfers (``internal-<id>``: no coins moved) and deposits custody never reported are not in flight."""
    asset_ids = list(asset_ids)

    def reported(status: str | None = None):
        events = CustodyEvent.objects.filter(
            type=EventType.DEPOSIT, asset_id=OuterRef("asset_id"), txid=OuterRef("txid"), vout=OuterRef("vout")
        )
        return events if status is None else events.filter(status=status)

    totals: dict[int, Decimal] = {}
    credited_early = (
        Deposit.objects.filter(asset_id__in=asset_ids, status=DepositStatus.CREDITED)
        .filter(Exists(reported()))
        .exclude(Exists(reported(CustodyEventStatus.CONFIRMED)))
        .exclude(Exists(reported(CustodyEventStatus.FAILED)))
        .values_list("asset_id", "amount")
    )
    for asset_id, amount in credited_early:
        totals[asset_id] = totals.get(asset_id, Decimal(0)) + amount
    credited = Deposit.objects.filter(
        asset_id=OuterRef("asset_id"), txid=OuterRef("txid"), vout=OuterRef("vout"), status=DepositStatus.CREDITED
    )
    confirmed_uncredited = (
        CustodyEvent.objects.filter(
            asset_id__in=asset_ids,
            type=EventType.DEPOSIT,
            status=CustodyEventStatus.CONFIRMED,
            state=EventState.RECEIVED,
        )
        .exclude(Exists(credited))
        .values_list("asset_id", "txid", "vout", "amount")
        .distinct()
    )
    for asset_id, _, _, amount in confirmed_uncredited:
        totals[asset_id] = totals.get(asset_id, Decimal(0)) - amount
    return totals


def withdrawal_addresses_for_user(*, user_id: int) -> QuerySet[WithdrawalAddress]:
    """The user's withdrawal address book, newest first."""
    return WithdrawalAddress.objects.filter(user_id=user_id).select_related("asset").order_by("-id")
