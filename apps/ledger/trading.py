"""The ledger's side of trading: the accounts a batch of orders touches, locked in id order, and the
recipes of an order's journal entries (hold, release, fill) as :class:`EntryRequest`\\ s.

Only :mod:`apps.ledger` locks or writes ledger rows; the orders app asks this module for
the accounts (:class:`TradingAccounts`) and the entries, then posts them all with one
:func:`apps.ledger.services.entries_post` call in its own transaction.

Locking: :meth:`TradingAccounts.lock` takes, in one ordered ``SELECT ... FOR NO KEY
UPDATE``, the available and held accounts of every user of the batch in the market's two
assets and the fee revenue shards its fills credit (the market's: :func:`market_fee_shard_key`). Two transactions that each lock
their accounts this way before their first entry take them in the same global (id)
order and cannot deadlock each other; ``entries_post`` then re-locks rows the
transaction already holds. The recipes are DESIGN.md section 4.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from .models import AccountKind, Asset, EntryReason
from .services import EntryRequest, Leg, fee_revenue_shard, hold_legs, release_legs, system_account, user_accounts

_LOCK_TRADING_ACCOUNTS = """
    SELECT id, owner_id, asset_id, kind, shard, balance FROM ledger_account
    WHERE asset_id = ANY(%s::bigint[])
      AND ((owner_id = ANY(%s::bigint[]) AND kind IN ('user_available', 'user_held'))
           OR (owner_id IS NULL AND kind = 'fee_revenue' AND shard = ANY(%s::int[])))
    ORDER BY id
    FOR NO KEY UPDATE
"""

AVAILABLE_BALANCES_SQL = """
    SELECT owner_id, asset_id, balance FROM ledger_account
    WHERE kind = 'user_available' AND owner_id = ANY(%s::bigint[]) AND asset_id = ANY(%s::bigint[])
"""
"""The available balances of users (first array) in assets (second), unlocked: ``(user id, asset id, balance)``
rows (none for an account not created yet: its balance is 0). A sequencer plans with them and checks them
again under :meth:`TradingAccounts.lock` (:meth:`TradingAccounts.available_balance`)."""


class TradingAccounts:
    """The ledger account ids of a batch of orders, locked by :meth:`lock`.

    Maps ``(user, asset)`` to the user's available and held account, ``(asset, shard
    key)`` to the fee revenue shard that key names; ``balances`` maps the locked account
    ids to their balances as locked (what the batch's first entry starts from).
    """

    def __init__(self, assets: Iterable[Asset]):
        self.assets = {asset.id: asset for asset in assets}
        self.users: dict[tuple[int, int, str], int] = {}
        self.fee_shards: dict[tuple[int, int], int] = {}
        self.balances: dict[int, Decimal] = {}

    @classmethod
    def lock(
        cls,
        cursor,
        *,
        user_ids: Iterable[int],
        assets: Iterable[Asset],
        fee_keys: Iterable[str] = (),
        with_statement: str = "",
        with_params: list | None = None,
    ) -> "TradingAccounts":
        """Lock (``FOR NO KEY UPDATE``, held to commit, id order) the accounts of ``user_ids`` in
        ``assets`` and the fee revenue shards ``fee_keys`` name (shard keys, :func:`market_fee_shard_key`) in one
        statement.

        ``cursor`` is a :class:`apps.ledger.db.PreparedCursor` in the caller's transaction.
        ``with_statement`` (with ``with_params``, optional) is a data-modifying statement of the
        caller sent in the same round trip, as a ``WITH`` ahead of the lock; its errors (such as
        an ``IntegrityError``) propagate. ``assets`` are :class:`Asset`\\ s with at least id, code
        and decimals. Missing user accounts are created (their first use), missing fee shards on
        first use by :meth:`fee_revenue`.
        """
        accounts = cls(assets)
        user_ids = set(user_ids)
        shards = {fee_revenue_shard(key) for key in fee_keys}
        sql = (
            f"WITH written AS ({with_statement}) {_LOCK_TRADING_ACCOUNTS}" if with_statement else _LOCK_TRADING_ACCOUNTS
        )
        cursor.execute(sql, [*(with_params or []), list(accounts.assets), list(user_ids), list(shards)])
        for account_id, owner_id, asset_id, kind, shard, balance in cursor.fetchall():
            accounts.balances[account_id] = balance
            if owner_id is None:
                accounts.fee_shards[(asset_id, shard)] = account_id
            else:
                accounts.users[(owner_id, asset_id, kind)] = account_id
        for user_id in user_ids:
            for asset in accounts.assets.values():
                keys = [(user_id, asset.id, kind) for kind in (AccountKind.USER_AVAILABLE, AccountKind.USER_HELD)]
                if not all(key in accounts.users for key in keys):
                    available, held = user_accounts(user_id, asset)
                    accounts.users[keys[0]], accounts.users[keys[1]] = available.id, held.id
        return accounts

    def available_balance(self, user_id: int, asset_id: int) -> Decimal:
        """The user's available balance of the asset as locked (0 for an account created by :meth:`lock`)."""
        return self.balances.get(self.available(user_id, asset_id), Decimal(0))

    def available(self, user_id: int, asset_id: int) -> int:
        """The id of the user's ``user_available`` account of the asset."""
        return self.users[(user_id, asset_id, AccountKind.USER_AVAILABLE)]

    def held(self, user_id: int, asset_id: int) -> int:
        """The id of the user's ``user_held`` account of the asset."""
        return self.users[(user_id, asset_id, AccountKind.USER_HELD)]

    def fee_revenue(self, asset_id: int, shard_key: str) -> int:
        """The id of the fee revenue shard of the asset that ``shard_key`` names (created on first use)."""
        account_id = self.fee_shards.get((asset_id, fee_revenue_shard(shard_key)))
        if account_id is None:
            account = system_account(AccountKind.FEE_REVENUE, self.assets[asset_id], shard_key=shard_key)
            account_id = self.fee_shards[(asset_id, account.shard)] = account.id
        return account_id


def order_hold_entry(
    accounts: TradingAccounts, *, order_id: int, user_id: int, asset_id: int, amount: Decimal
) -> EntryRequest:
    """``order:<id>:hold``: Dr the user's available, Cr the user's held, ``amount`` (positive) of the asset.

    Posting it raises :class:`~apps.ledger.errors.InsufficientFunds` when the available balance is short.
    """
    return EntryRequest(
        idempotency_key=f"order:{order_id}:hold",
        reason=EntryReason.ORDER_HOLD,
        legs=hold_legs(
            available_id=accounts.available(user_id, asset_id), held_id=accounts.held(user_id, asset_id), amount=amount
        ),
        reference_type="order",
        reference_id=str(order_id),
    )


def order_release_entry(
    accounts: TradingAccounts, *, order_id: int, user_id: int, asset_id: int, amount: Decimal
) -> EntryRequest:
    """``order:<id>:release``: Dr the user's held, Cr the user's available: an ended order's whole
    remaining hold (``amount``, positive), once per order."""
    return EntryRequest(
        idempotency_key=f"order:{order_id}:release",
        reason=EntryReason.ORDER_RELEASE,
        legs=release_legs(
            held_id=accounts.held(user_id, asset_id), available_id=accounts.available(user_id, asset_id), amount=amount
        ),
        reference_type="order",
        reference_id=str(order_id),
    )


def market_fee_shard_key(market_id: int) -> str:
    """The shard key of every fee a market's fills credit (``market:<id>``): one fee revenue shard per asset and
    market.

    A market's fills are applied one batch at a time (its sequencer, or its row lock inline), so one shard per
    market costs it nothing, while markets sharing an asset (every USDT market) credit different shards instead of
    each batch locking most of them: keyed by trade, four markets' sequencers spent most of their waits on each
    other's USDT fee shards (``bench/matching.py``, four markets' queued backlog, ``pg_stat_activity`` sampled).
    The key depends on the fill alone, so an entry replayed names the same account."""
    return f"market:{market_id}"


@dataclass(frozen=True)
class FillTerms:
    """One fill as the ledger settles it: ``qty`` base for ``quote_qty`` quote between ``buyer`` and
    ``seller`` (user ids), each fee in the asset that side receives (buyer in base, seller in quote), credited
    to the fee revenue shards ``fee_shard_key`` names (:func:`market_fee_shard_key`)."""

    trade_id: str
    base_id: int
    quote_id: int
    buyer_id: int
    seller_id: int
    qty: Decimal
    quote_qty: Decimal
    buyer_fee: Decimal
    seller_fee: Decimal
    fee_shard_key: str


def trade_fill_entry(accounts: TradingAccounts, terms: FillTerms, *, metadata: dict | None = None) -> EntryRequest:
    """One journal entry for one fill (DESIGN.md section 4), key ``trade:<trade id>``.

    Base: Dr seller user_held ``qty``; Cr buyer user_available ``qty - buyer fee``; Cr
    fee_revenue the buyer fee. Quote: Dr buyer user_held ``quote_qty``; Cr seller
    user_available ``quote_qty - seller fee``; Cr fee_revenue the seller fee (the shards of ``fee_shard_key``). Zero legs
    (a zero fee, or a fee that takes all of a one-unit fill) are left out.
    """
    key = f"trade:{terms.trade_id}"
    t = terms
    legs = [Leg(accounts.held(t.seller_id, t.base_id), t.qty), Leg(accounts.held(t.buyer_id, t.quote_id), t.quote_qty)]
    if t.qty - t.buyer_fee:
        legs.append(Leg(accounts.available(t.buyer_id, t.base_id), t.buyer_fee - t.qty))
    if t.quote_qty - t.seller_fee:
        legs.append(Leg(accounts.available(t.seller_id, t.quote_id), t.seller_fee - t.quote_qty))
    if t.buyer_fee:
        legs.append(Leg(accounts.fee_revenue(t.base_id, t.fee_shard_key), -t.buyer_fee))
    if t.seller_fee:
        legs.append(Leg(accounts.fee_revenue(t.quote_id, t.fee_shard_key), -t.seller_fee))
    return EntryRequest(
        idempotency_key=key,
        reason=EntryReason.TRADE,
        legs=legs,
        reference_type="trade",
        reference_id=t.trade_id,
        metadata=metadata,
    )
