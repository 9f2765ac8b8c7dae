"""Forged journal entries for the reconciliation tests: balanced entries with no business event behind them.

Each is posted by the ledger's own low-level service (:func:`apps.ledger.services.entry_post`), as a bug calling
it with no business record would post it: it passes every check of the posting function (balanced, exact, no
user account below zero), so only reconciliation's backing checks (invariant 8) can find it.
"""

import uuid
from decimal import Decimal

from django.db import transaction

from apps.ledger.models import AccountKind, Asset, EntryReason, JournalEntry
from apps.ledger.reconciliation import Report
from apps.ledger.services import Leg, credit, debit, entry_post, system_account, user_account

BACKING_CHECKS = frozenset(
    {"entry_reasons_backed", "order_entries_backed", "wallet_entries_backed", "adjustment_entries_backed"}
)
"""The checks that look from each journal entry back to its business record."""


def forge(
    *,
    reason: str,
    legs: list[Leg],
    idempotency_key: str | None = None,
    reference_type: str = "",
    reference_id: str = "",
) -> JournalEntry:
    """Post ``legs`` under ``reason`` and the reference given, with a fresh key unless ``idempotency_key`` is given."""
    with transaction.atomic():
        return entry_post(
            idempotency_key=idempotency_key or f"forged:{uuid.uuid4()}",
            reason=reason,
            legs=legs,
            reference_type=reference_type,
            reference_id=reference_id,
        )


def user_to_user(source, destination, asset: Asset, amount: Decimal | str) -> list[Leg]:
    """Dr ``source``'s available, Cr ``destination``'s available: ``amount`` moved from one user to another."""
    amount = Decimal(amount)
    return [debit(user_account(source.id, asset), amount), credit(user_account(destination.id, asset), amount)]


def available_to_held(owner, asset: Asset, amount: Decimal | str, *, reverse: bool = False) -> list[Leg]:
    """Dr available, Cr held of ``owner`` (a hold), or the other way round (``reverse``: a release)."""
    amount = Decimal(amount)
    available = user_account(owner.id, asset)
    held = user_account(owner.id, asset, AccountKind.USER_HELD)
    return (
        [debit(held, amount), credit(available, amount)]
        if reverse
        else [debit(available, amount), credit(held, amount)]
    )


def system_to_user(kind: str, owner, asset: Asset, amount: Decimal | str) -> list[Leg]:
    """Dr the system account ``kind`` (custody, equity...), Cr ``owner``'s available: money out of nowhere."""
    amount = Decimal(amount)
    return [debit(system_account(kind, asset), amount), credit(user_account(owner.id, asset), amount)]


def system_to_system(debited: str, credited: str, asset: Asset, amount: Decimal | str) -> list[Leg]:
    """Dr the system account ``debited``, Cr ``credited``: no user involved."""
    amount = Decimal(amount)
    return [debit(system_account(debited, asset), amount), credit(system_account(credited, asset), amount)]


UNBACKED_RECIPES = frozenset({EntryReason.TRANSFER, EntryReason.HOLD, EntryReason.RELEASE})
"""The reasons of the ledger's own recipes that no production code posts (``transfer_create``, ``funds_hold`` and
``funds_release`` with their default reasons): the ledger's tests and benches post them on purpose."""


def ok_but_for_unbacked_recipes(report: Report) -> bool:
    """Whether every check of ``report`` passed but ``entry_reasons_backed``, and that one flagged only entries of
    :data:`UNBACKED_RECIPES` (a ledger test of transfers or holds, which no business record backs)."""
    return all(
        check.ok
        or (check.name == "entry_reasons_backed" and all(row["reason"] in UNBACKED_RECIPES for row in check.details))
        for check in report.checks
    )


def backing_failures(report: Report) -> dict[str, list[dict]]:
    """The backing checks that failed, with their rows."""
    return {check.name: check.details for check in report.checks if check.name in BACKING_CHECKS and not check.ok}


def flagged_entries(report: Report) -> dict[int, str]:
    """``{entry id: problem}`` over every backing check of ``report``."""
    return {row["entry"]: row["problem"] for rows in backing_failures(report).values() for row in rows}
