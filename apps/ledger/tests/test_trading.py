"""The ledger's trading side: the ordered account lock of a batch and the hold, release and fill recipes."""

from decimal import Decimal

import pytest
from django.db import transaction

from apps.ledger.db import PreparedCursor
from apps.ledger.errors import InsufficientFunds
from apps.ledger.models import Account, AccountKind, JournalEntry
from apps.ledger.selectors import balances_for_user
from apps.ledger.services import entries_post, system_account
from apps.ledger.tests.factories import UserFactory, fund
from apps.ledger.trading import (
    FillTerms,
    TradingAccounts,
    fee_revenue_shard,
    order_hold_entry,
    order_release_entry,
    trade_fill_entry,
)

D = Decimal


def balance(user, asset) -> tuple[Decimal, Decimal]:
    found = next((b for b in balances_for_user(user.id) if b.asset == asset.code), None)
    return (found.available, found.held) if found else (D(0), D(0))


@pytest.mark.parametrize("key", ["trade:1-1", "trade:77-3", "trade:123456-999", "order:5:hold"])
def test_fee_revenue_shard_names_the_account_system_account_gives_for_the_key(db, usdt, settings, key):
    settings.LEDGER_FEE_REVENUE_SHARDS = 7
    assert system_account(AccountKind.FEE_REVENUE, usdt, shard_key=key).shard == fee_revenue_shard(key)


def test_lock_creates_missing_user_accounts_and_names_every_account_of_the_batch(db, btc, usdt):
    buyer, seller = UserFactory(), UserFactory()
    fund(buyer, usdt, "10")
    with transaction.atomic(), PreparedCursor() as cursor:
        accounts = TradingAccounts.lock(
            cursor, user_ids={buyer.id, seller.id}, assets=[btc, usdt], fee_keys=["market:1"]
        )
        ids = {accounts.available(u.id, a.id) for u in (buyer, seller) for a in (btc, usdt)}
        ids |= {accounts.held(u.id, a.id) for u in (buyer, seller) for a in (btc, usdt)}
        assert len(ids) == 8
        assert Account.objects.filter(id__in=ids, owner__in=[buyer, seller]).count() == 8
        assert accounts.fee_revenue(usdt.id, "market:1") == (
            system_account(AccountKind.FEE_REVENUE, usdt, shard_key="market:1").id
        )


def test_hold_then_release_moves_available_to_held_and_back(db, usdt):
    user = UserFactory()
    fund(user, usdt, "100")
    with transaction.atomic(), PreparedCursor() as cursor:
        accounts = TradingAccounts.lock(cursor, user_ids={user.id}, assets=[usdt])
        entries_post([order_hold_entry(accounts, order_id=1, user_id=user.id, asset_id=usdt.id, amount=D("60"))])
    assert balance(user, usdt) == (D("40"), D("60"))
    with transaction.atomic(), PreparedCursor() as cursor:
        accounts = TradingAccounts.lock(cursor, user_ids={user.id}, assets=[usdt])
        entries_post([order_release_entry(accounts, order_id=1, user_id=user.id, asset_id=usdt.id, amount=D("60"))])
    assert balance(user, usdt) == (D("100"), D("0"))
    assert set(JournalEntry.objects.values_list("idempotency_key", flat=True)) >= {"order:1:hold", "order:1:release"}


def test_a_hold_beyond_the_available_balance_is_refused(db, usdt):
    user = UserFactory()
    fund(user, usdt, "5")
    with pytest.raises(InsufficientFunds), transaction.atomic(), PreparedCursor() as cursor:
        accounts = TradingAccounts.lock(cursor, user_ids={user.id}, assets=[usdt])
        entries_post([order_hold_entry(accounts, order_id=2, user_id=user.id, asset_id=usdt.id, amount=D("5.000001"))])
    assert balance(user, usdt) == (D("5"), D("0"))


def test_a_fill_settles_both_sides_and_credits_each_fee_to_its_shard(db, btc, usdt):
    buyer, seller = UserFactory(), UserFactory()
    fund(buyer, usdt, "100")
    fund(seller, btc, "1")
    terms = FillTerms(
        trade_id="9-1",
        base_id=btc.id,
        quote_id=usdt.id,
        buyer_id=buyer.id,
        seller_id=seller.id,
        qty=D("0.5"),
        quote_qty=D("50"),
        buyer_fee=D("0.0005"),
        seller_fee=D("0.05"),
        fee_shard_key="market:3",
    )
    with transaction.atomic(), PreparedCursor() as cursor:
        accounts = TradingAccounts.lock(
            cursor, user_ids={buyer.id, seller.id}, assets=[btc, usdt], fee_keys=["market:3"]
        )
        entries_post(
            [
                order_hold_entry(accounts, order_id=9, user_id=buyer.id, asset_id=usdt.id, amount=D("50")),
                order_hold_entry(accounts, order_id=8, user_id=seller.id, asset_id=btc.id, amount=D("0.5")),
                trade_fill_entry(accounts, terms),
            ]
        )
    assert balance(buyer, usdt) == (D("50"), D(0))
    assert balance(buyer, btc) == (D("0.4995"), D(0))
    assert balance(seller, btc) == (D("0.5"), D(0))
    assert balance(seller, usdt) == (D("49.95"), D(0))
    assert system_account(AccountKind.FEE_REVENUE, btc, shard_key="market:3").balance == D("0.0005")
    assert system_account(AccountKind.FEE_REVENUE, usdt, shard_key="market:3").balance == D("0.05")


def test_a_fill_whose_fee_takes_the_whole_unit_leaves_out_the_zero_leg(db, btc, usdt):
    buyer, seller = UserFactory(), UserFactory()
    terms = FillTerms(
        "3-1", btc.id, usdt.id, buyer.id, seller.id, D("0.00000001"), D("0.01"), D("0.00000001"), D(0), "market:1"
    )
    with transaction.atomic(), PreparedCursor() as cursor:
        accounts = TradingAccounts.lock(cursor, user_ids={buyer.id, seller.id}, assets=[btc, usdt])
        entry = trade_fill_entry(accounts, terms)
    assert accounts.available(buyer.id, btc.id) not in {leg.account_id for leg in entry.legs}
    assert sum(leg.amount for leg in entry.legs) == 0
    assert len(entry.legs) == 4  # seller held base, buyer held quote, seller available quote, base fee


@pytest.mark.django_db(transaction=True)
def test_the_locked_accounts_stay_locked_until_the_transaction_ends(btc, usdt):
    from django.db import OperationalError
    from django.db import connection as main

    from apps.ledger.tests.threads import run_concurrently

    user = UserFactory()
    fund(user, usdt, "1")

    def try_lock(account_id: int):
        with transaction.atomic(), main.cursor() as cursor:
            cursor.execute("SELECT id FROM ledger_account WHERE id = %s FOR UPDATE NOWAIT", [account_id])
            return cursor.fetchone()[0]

    with transaction.atomic(), PreparedCursor() as cursor:
        accounts = TradingAccounts.lock(cursor, user_ids={user.id}, assets=[usdt])
        available = accounts.available(user.id, usdt.id)
        [during] = run_concurrently([lambda: try_lock(available)])
    [after] = run_concurrently([lambda: try_lock(available)])
    assert isinstance(during, OperationalError)
    assert after == available
