from decimal import Decimal

from apps.ledger.selectors import (
    balances_for_user,
    user_postings,
)
from apps.ledger.services import funds_hold
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


def test_user_postings_filter_by_asset(db, usdt, btc, user):
    fund(user, usdt, "1")
    fund(user, btc, "2")
    assert [p.asset.code for p in user_postings(user.id, asset_code="BTC")] == ["BTC"]
    assert len(user_postings(user.id)) == 2


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
