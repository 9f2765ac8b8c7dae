from decimal import Decimal
from io import StringIO

from django.contrib.auth import get_user_model
from django.core.management import call_command

from apps.ledger.models import Asset
from apps.ledger.reconciliation import reconcile
from apps.orders.models import Market
from apps.wallets.custody.simulator.models import SimDeposit
from apps.wallets.models import Deposit, DepositStatus
from apps.wallets.tests.factories import deliver_custody_callbacks


def seed() -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def test_seed_demo_creates_assets_markets_users_and_prints_the_logins(db):
    out = seed()

    assert sorted(Asset.objects.values_list("code", "decimals")) == [("BTC", 8), ("ETH", 18), ("USDT", 6)]
    assert sorted(Market.objects.values_list("symbol", flat=True)) == ["BTC-USDT", "ETH-BTC", "ETH-USDT"]
    approver = get_user_model().objects.get(username="approver")
    assert approver.is_staff and approver.has_perm("wallets.approve_withdrawal")
    assert not get_user_model().objects.get(username="alice").is_staff
    assert "alice" in out and "alice-demo-2026" in out


def test_seed_demo_is_idempotent(db):
    seed()
    deposits = SimDeposit.objects.count()
    out = seed()
    assert SimDeposit.objects.count() == deposits
    assert "(0 new deposits" in out
    assert Market.objects.count() == 3


def test_demo_markets_protect_market_orders_with_a_price_band(db):
    """The band was empty: a market buy swept the demo book to twice the market price."""
    seed()
    assert set(Market.objects.values_list("market_order_price_band", flat=True)) == {Decimal("5")}


def test_a_demo_market_seeded_without_a_band_gets_it_and_a_band_set_since_is_kept(db):
    seed()
    Market.objects.filter(symbol="BTC-USDT").update(market_order_price_band=None)
    Market.objects.filter(symbol="ETH-BTC").update(market_order_price_band=Decimal("1.5"), min_notional=Decimal("1"))

    seed()

    bands = dict(Market.objects.values_list("symbol", "market_order_price_band"))
    assert bands == {"BTC-USDT": Decimal("5"), "ETH-USDT": Decimal("5"), "ETH-BTC": Decimal("1.5")}
    assert Market.objects.get(symbol="ETH-BTC").min_notional == Decimal("1")


def test_demo_funding_goes_through_custody_and_reconciles(db, settings):
    settings.CUSTODY_SIMULATOR_DELAY = 0
    seed()

    deliver_custody_callbacks()

    assert Deposit.objects.exclude(status=DepositStatus.CREDITED).count() == 0
    alice = get_user_model().objects.get(username="alice")
    from apps.ledger.selectors import balances_for_user

    assert {b.asset: b.available for b in balances_for_user(alice.id)} == {
        "BTC": Decimal("2"),
        "ETH": Decimal("30"),
        "USDT": Decimal("100000"),
    }
    assert reconcile().ok


def test_demo_traders_have_an_e_mail_and_an_active_address_per_funded_asset(db):
    from django.utils import timezone

    from apps.wallets.address_book import withdrawal_address_require_active
    from apps.wallets.models import WithdrawalAddress

    seed()
    seed()
    alice = get_user_model().objects.get(username="alice")
    assert alice.email == "alice@example.com"
    book = WithdrawalAddress.objects.filter(user=alice).select_related("asset")
    assert sorted(entry.asset.code for entry in book) == ["BTC", "ETH", "USDT"]
    for entry in book:
        assert entry.status_at(timezone.now()) == "active"
        withdrawal_address_require_active(user_id=alice.id, asset=entry.asset, address=entry.address)
    assert not WithdrawalAddress.objects.filter(user__username="approver").exists()
