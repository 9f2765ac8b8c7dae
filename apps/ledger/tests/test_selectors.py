from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from apps.ledger.models import EntryReason
from apps.ledger.selectors import (
    account_balance_at,
    account_statement,
    balances_for_user,
    user_postings,
)
from apps.ledger.services import funds_hold, user_account
from apps.ledger.tests.factories import UserFactory, fund


def test_balances_for_user_lists_every_asset_with_available_held_and_total(db, usdt, btc, user):
    fund(user, usdt, "100")
    funds_hold(user_id=user.id, asset=usdt, amount=Decimal("30"), idempotency_key="order:1:hold")

    balances = {b.asset: b for b in balances_for_user(user.id)}

    assert list(balances) == ["BTC", "USDT"]
    assert (balances["USDT"].available, balances["USDT"].held, balances["USDT"].total) == (
        Decimal("70"),
        Decimal("30"),
        Decimal("100"),
    )
    assert (balances["BTC"].available, balances["BTC"].held, balances["BTC"].total) == (0, 0, 0)
    assert balances["BTC"].decimals == 8


def test_account_statement_shows_each_posting_with_balance_after_reason_and_reference(db, usdt, user):
    fund(user, usdt, "100")
    funds_hold(
        user_id=user.id,
        asset=usdt,
        amount=Decimal("30"),
        idempotency_key="order:5:hold",
        reason=EntryReason.ORDER_HOLD,
        reference_type="order",
        reference_id="5",
    )

    statement = list(account_statement(user_account(user.id, usdt).id))

    assert [(p.amount, p.balance_after, p.entry.reason) for p in statement] == [
        (Decimal("30"), Decimal("70"), EntryReason.ORDER_HOLD),
        (Decimal("-100"), Decimal("100"), EntryReason.ADJUSTMENT),
    ]
    assert (statement[0].entry.reference_type, statement[0].entry.reference_id) == ("order", "5")


def test_user_postings_filter_by_asset(db, usdt, btc, user):
    fund(user, usdt, "1")
    fund(user, btc, "2")
    assert [p.asset.code for p in user_postings(user.id, asset_code="BTC")] == ["BTC"]
    assert len(user_postings(user.id)) == 2


def test_balance_as_of_a_past_time(db, usdt, user):
    before_anything = timezone.now() - timedelta(seconds=1)
    fund(user, usdt, "100")
    after_deposit = timezone.now()
    funds_hold(user_id=user.id, asset=usdt, amount=Decimal("30"), idempotency_key="order:1:hold")
    account = user_account(user.id, usdt)

    assert account_balance_at(account.id, before_anything) == Decimal("0")
    assert account_balance_at(account.id, after_deposit) == Decimal("100")
    assert account_balance_at(account.id, timezone.now()) == Decimal("70")


def test_balances_of_several_users_carry_each_assets_display_places(db, usdt, btc):
    """Regression: the streams' batch read built balances without the display places the pages need, and the
    relay failed on every round that published one."""
    from apps.ledger.selectors import balances_for_users

    usdt.display_decimals = 2
    usdt.save(update_fields=["display_decimals"])
    alice, bob = UserFactory(), UserFactory()
    fund(alice, usdt, "12.5")

    balances = balances_for_users(user_ids={alice.id, bob.id}, asset_ids={usdt.id, btc.id})

    shown = {(user_id, b.asset): (b.available, b.display_places) for user_id, rows in balances.items() for b in rows}
    assert shown[(alice.id, "USDT")] == (Decimal("12.5"), 2)
    assert shown[(bob.id, "BTC")] == (Decimal(0), 8)
