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


def withdrawal_requested_under(*, user_id: int, request_key: str) -> bool:
    """Whether the user already requested a withdrawal under ``request_key`` (its replay returns it: no new one)."""
    return bool(request_key) and Withdrawal.objects.filter(user_id=user_id, request_key=request_key).exists()


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
    """Per asset id, what custody's holdings count of deposits and the ledger's custody balance does not yet, each
    output once, as a negative amount (invariant 5). Custody counts a deposit once it reports it (its first callback;
    the custody adapter's holdings must say so), the ledger once it credits it at the asset's confirmations; in
    between, the output is one custody reported and has not reported failed:

    - a deposit recorded from custody's reports and still ``pending``;
    - an output whose report is stored in the inbox but not processed yet, with no deposit recorded (failed ones left
      out).

    A deposit credited that custody never counted (a forged callback; coins custody no longer holds) is not in
    flight: it shows as a difference."""
    asset_ids = list(asset_ids)
    pending = (
        Deposit.objects.filter(asset_id__in=asset_ids, status=DepositStatus.PENDING)
        .values("asset_id")
        .annotate(total=Sum("amount"))
        .values_list("asset_id", "total")
        .order_by()
    )
    totals = {asset_id: -total for asset_id, total in pending}
    recorded = Deposit.objects.filter(asset_id=OuterRef("asset_id"), txid=OuterRef("txid"), vout=OuterRef("vout"))
    unrecorded = (
        CustodyEvent.objects.filter(asset_id__in=asset_ids, type=EventType.DEPOSIT, state=EventState.RECEIVED)
        .exclude(status=CustodyEventStatus.FAILED)
        .exclude(Exists(recorded))
        .values_list("asset_id", "txid", "vout", "amount")
        .order_by()  # no ordering columns in the DISTINCT: each output once
        .distinct()
    )
    for asset_id, _, _, amount in unrecorded:
        totals[asset_id] = totals.get(asset_id, Decimal(0)) - amount
    return totals


def withdrawal_addresses_for_user(*, user_id: int) -> QuerySet[WithdrawalAddress]:
    """The user's withdrawal address book, newest first."""
    return WithdrawalAddress.objects.filter(user_id=user_id).select_related("asset").order_by("-id")
