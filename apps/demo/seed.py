"""Demo data for ``make run``: assets, markets, traders, operators, funding through the simulated custody.

Every step is idempotent: running it again changes nothing that is already there.
Funding goes through the simulated custody like a real deposit (its callbacks reach
the webhook once the web server runs, and the worker credits them), so the ledger's
custody balance always matches what custody reports. Each demo user has an e-mail address
(``<name>@example.com``) and, per asset, one withdrawal address already active in their
address book ("demo wallet"), so withdrawals work at once without e-mail links.
"""

from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.ledger.models import Asset
from apps.ledger.services import asset_register
from apps.orders.models import Market
from apps.orders.services import market_create, market_filters_update
from apps.wallets.custody.simnet import new_address
from apps.wallets.custody.simulator.provider import SimulatedCustody
from apps.wallets.models import WithdrawalAddress
from apps.wallets.services import deposit_address_get_or_create

from .credentials import DEMO_TOTP_KEYS

D = Decimal

# (code, name, decimals, decimals shown, withdrawal fee, min withdrawal, auto-approved up to, daily limit)
ASSETS = [
    ("BTC", "Bitcoin", 8, 8, D("0.0001"), D("0.001"), D("0.5"), D("10")),
    ("ETH", "Ether", 18, 8, D("0.002"), D("0.01"), D("10"), D("200")),
    ("USDT", "Tether USD", 6, 2, D("1"), D("10"), D("10000"), D("500000")),
]

# Market orders' price protection on every demo market, in %: a market order fills no further than this from
# the best price it meets (the rest expires, reason price_protection), so a market buy cannot sweep a thin
# book to twice the price.
DEMO_PRICE_BAND = D("5")

# (base, quote, tick size, step size, min qty, max qty, min notional in quote)
MARKETS = [
    ("BTC", "USDT", D("0.01"), D("0.0001"), D("0.0001"), D("100"), D("5")),
    ("ETH", "USDT", D("0.01"), D("0.0001"), D("0.001"), D("1000"), D("5")),
    ("ETH", "BTC", D("0.00001"), D("0.001"), D("0.001"), D("1000"), D("0.0001")),
]


@dataclass(frozen=True)
class DemoUser:
    username: str
    password: str
    role: str
    groups: tuple[str, ...] = ()
    funding: tuple[tuple[str, Decimal], ...] = ()

    @property
    def is_staff(self) -> bool:
        return bool(self.groups)


TRADER_FUNDS = (("BTC", D("2")), ("ETH", D("30")), ("USDT", D("100000")))
USERS = [
    DemoUser("alice", "alice-demo-2026", "trader", funding=TRADER_FUNDS),
    DemoUser("bob", "bob-demo-2026", "trader", funding=TRADER_FUNDS),
    DemoUser(
        "marketmaker",
        "marketmaker-demo-2026",
        "market-making bot (maker)",
        funding=(("BTC", D("50")), ("ETH", D("1000")), ("USDT", D("3000000"))),
    ),
    DemoUser(
        "taker",
        "taker-demo-2026",
        "market-making bot (taker)",
        funding=(("BTC", D("10")), ("ETH", D("200")), ("USDT", D("600000"))),
    ),
    DemoUser("operator", "operator-demo-2026", "operator (back office)", groups=("operators",)),
    DemoUser(
        "approver", "approver-demo-2026", "approver (back office, one-time password)", groups=("operators", "approvers")
    ),
]


def seed_assets() -> dict[str, Asset]:
    assets = {}
    for code, name, decimals, shown, fee, minimum, auto_approve, daily in ASSETS:
        assets[code] = asset_register(
            code=code,
            name=name,
            decimals=decimals,
            display_decimals=shown,
            network="simnet",
            confirmations_required=2,
            withdrawal_fee=fee,
            min_withdrawal=minimum,
            withdrawal_auto_approve_limit=auto_approve,
            withdrawal_daily_limit=daily,
        )
    return assets


def seed_markets(assets: dict[str, Asset]) -> list[Market]:
    """The demo markets, each with the price band :data:`DEMO_PRICE_BAND`; a demo market seeded before there
    was one (its band empty) gets it, its other filters kept. A band an operator set is left as it is."""
    markets = []
    for base, quote, tick, step, min_qty, max_qty, min_notional in MARKETS:
        market = Market.objects.filter(symbol=f"{base}-{quote}").first() or market_create(
            base=assets[base],
            quote=assets[quote],
            tick_size=tick,
            step_size=step,
            min_qty=min_qty,
            max_qty=max_qty,
            min_notional=min_notional,
            market_order_price_band=DEMO_PRICE_BAND,
        )
        if market.market_order_price_band is None:
            market = market_filters_update(
                market_id=market.id,
                min_qty=market.min_qty,
                max_qty=market.max_qty,
                min_notional=market.min_notional,
                market_order_price_band=DEMO_PRICE_BAND,
            )
        markets.append(market)
    return markets


def seed_users() -> list:
    """The demo users; the demo traders with a second factor (their published TOTP keys), so that their API
    keys may withdraw."""
    User = get_user_model()
    users = []
    for demo in USERS:
        user = User.objects.filter(username=demo.username).first()
        if user is None:
            user = User.objects.create_user(
                username=demo.username,
                email=f"{demo.username}@example.com",
                password=demo.password,
                is_staff=demo.is_staff,
            )
            user.groups.set(Group.objects.filter(name__in=demo.groups))
        key = DEMO_TOTP_KEYS.get(demo.username)
        if key and not TOTPDevice.objects.filter(user=user, confirmed=True).exists():
            TOTPDevice.objects.create(user=user, name="demo authenticator", key=key, confirmed=True)
        users.append(user)
    return users


def seed_funding(assets: dict[str, Asset], users: list) -> int:
    """Deposit each demo user's funding at the simulated custody (once: the txid names user and asset).

    Returns how many deposits were new.
    """
    custody = SimulatedCustody()
    by_name = {user.username: user for user in users}
    new = 0
    for demo in USERS:
        for code, amount in demo.funding:
            address = deposit_address_get_or_create(user_id=by_name[demo.username].id, asset=assets[code])
            try:
                custody.deposit_receive(address=address.address, amount=amount, txid=f"demo-{demo.username}-{code}")
            except ValueError:  # already received by an earlier run
                continue
            new += 1
    return new


def seed_withdrawal_addresses(*, user_id: int, asset: Asset, addresses: list[str], label: str) -> None:
    """Demo and benchmark data only: ``addresses`` in the user's book, ``active`` at once (as if their e-mail
    links had been followed and the cooling-off were over), instead of going through
    :func:`apps.wallets.address_book.withdrawal_address_add`. Addresses already there are left alone."""
    now = timezone.now()
    WithdrawalAddress.objects.bulk_create(
        [
            WithdrawalAddress(
                user_id=user_id,
                asset=asset,
                network=asset.network,
                address=address,
                label=label,
                confirmed_at=now,
                usable_from=now,
            )
            for address in addresses
        ],
        ignore_conflicts=True,
    )


def seed_address_books(assets: dict[str, Asset], users: list) -> None:
    """One active "demo wallet" withdrawal address per asset for each demo user who has funds."""
    by_name = {user.username: user for user in users}
    for demo in USERS:
        user = by_name[demo.username]
        for code, _amount in demo.funding:
            if not WithdrawalAddress.objects.filter(user=user, asset=assets[code], label="demo wallet").exists():
                seed_withdrawal_addresses(
                    user_id=user.id, asset=assets[code], addresses=[new_address()], label="demo wallet"
                )


def seed_demo() -> int:
    """Create every piece of demo data that is missing; return the number of new funding deposits."""
    assets = seed_assets()
    seed_markets(assets)
    users = seed_users()
    seed_address_books(assets, users)
    return seed_funding(assets, users)
