"""Owner capital for the benchmarks' users, granted as the back office grants it. Not a benchmark itself.

:func:`capital_grant` records an approved manual adjustment (maker-checker) and posts it with
:func:`apps.ledger.services.adjustment_post`, the adjustment naming its entry, as
``apps.backoffice.services.adjustment_approve`` does without its permissions and second factor: so a benchmark's
``reconcile`` finds the record behind its funding (invariant 8, backing). Call it once Django is set up.
"""

from collections.abc import Sequence

MAKER, CHECKER = "bench-maker", "bench-checker"
"""The operators who draft and approve the benchmarks' funding (their own users, holding nothing)."""


def capital_grant(*, legs: Sequence, memo: str) -> int:
    """Post ``legs`` (:class:`apps.ledger.services.Leg`\\ s, balanced, one on ``equity``, none on held funds) as an
    approved adjustment with ``memo``; return the journal entry's id. Raises what ``adjustment_post`` raises."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone

    from apps.backoffice.models import Adjustment, AdjustmentStatus
    from apps.ledger.services import adjustment_post

    User = get_user_model()
    maker, _ = User.objects.get_or_create(username=MAKER)
    checker, _ = User.objects.get_or_create(username=CHECKER)
    with transaction.atomic():
        adjustment = Adjustment.objects.create(
            memo=memo, legs=[{"account": leg.account_id, "amount": str(leg.amount)} for leg in legs], created_by=maker
        )
        entry = adjustment_post(adjustment_id=str(adjustment.id), legs=legs, memo=memo, operator_id=checker.id)
        Adjustment.objects.filter(id=adjustment.id).update(
            status=AdjustmentStatus.APPROVED, decided_by=checker, decided_at=timezone.now(), entry=entry
        )
    return entry.id
