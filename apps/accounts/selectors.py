"""Reads of the accounts app: the restrictions operators set on an account, whether an e-mail address is taken,
the e-mail address change waiting for its link."""

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from .locks import withdrawals_lock
from .models import AccountRestriction, EmailRequest, WithdrawalHold


def account_restriction(*, user_id: int) -> AccountRestriction | None:
    """The user's restriction row (flags, reasons, who changed them last), or None when never restricted."""
    return AccountRestriction.objects.select_related("updated_by").filter(user_id=user_id).first()


# Whether an operator froze the user's trading (new orders are refused), as one prepared statement
# (parameter: the user id; a row when frozen): the order placement sends it in the same round trip
# as the market lock (apps.orders.services.order_place).
TRADING_FROZEN_SQL = f"SELECT 1 FROM {AccountRestriction._meta.db_table} WHERE user_id = %s AND trading_frozen"


def withdrawals_blocked(*, user_id: int, until_commit: bool = False) -> bool:
    """Whether an operator blocked the user's withdrawals (new withdrawals and approvals are refused).

    With ``until_commit`` (inside a transaction) it first takes the user's withdrawal-block lock shared
    (:mod:`apps.accounts.locks`), so no block can be committed before this transaction ends: a withdrawal step
    that read "not blocked" this way is done before any block takes effect.
    """
    if until_commit:
        withdrawals_lock(user_id=user_id, shared=True)
    return AccountRestriction.objects.filter(user_id=user_id, withdrawals_blocked=True).exists()


def withdrawal_hold(*, user_id: int) -> WithdrawalHold | None:
    """The pause of the user's withdrawals after a security change (:mod:`apps.accounts.holds`: its end and
    reason) while it lasts, or None. In a withdrawal step, call :func:`withdrawals_blocked` with ``until_commit``
    first: its shared lock orders this read after any pause being committed."""
    return WithdrawalHold.objects.filter(user_id=user_id, until__gt=timezone.now()).first()


EMAIL_IN_USE = "This e-mail address is already in use."


def email_in_use(email: str, *, except_user_id: int | None = None) -> bool:
    """Whether another user (not ``except_user_id``) has ``email``, whatever its case: addresses are unique
    per user (the unique index on ``lower(email)`` of ``accounts`` migration 0004). Empty is never in use."""
    if not email:
        return False
    others = get_user_model().objects.filter(email__iexact=email)
    if except_user_id is not None:
        others = others.exclude(pk=except_user_id)
    return others.exists()


def email_request_open(*, user_id: int) -> EmailRequest | None:
    """The user's request for a new e-mail address whose link may still work (neither used, retired nor older
    than ``EMAIL_CONFIRMATION_MAX_AGE``), or None. A request whose address another account had counts too: the
    page shows both alike."""
    since = timezone.now() - timedelta(seconds=settings.EMAIL_CONFIRMATION_MAX_AGE)
    return EmailRequest.objects.open().filter(user_id=user_id, created_at__gte=since).order_by("-id").first()
