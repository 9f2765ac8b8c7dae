"""Markets, fee schedules, orders and trades (DESIGN.md section 7).

What the database enforces by itself, whatever code writes:

- a market's tick and step can never make ``quantity * price`` inexact for the quote
  asset (``decimals(tick) + decimals(step) <= quote.decimals``, ``decimals(step) <=
  base.decimals``): a trigger reads the assets' precisions; its symbol, assets, tick and
  step never change once created (open orders are multiples of them);
- an order's shape matches its type (a limit order has a price and a quantity, a market
  order no price and either a base quantity or, for a buy, a quote budget);
- an ended order (filled, cancelled, expired, rejected) has no remaining hold, only GTC
  limit orders rest in the book, and the filled quantity never exceeds the order's;
- a trade's quote quantity is exactly ``qty * price``; one trade per (taker order, fill number).

Orders of a market are only written under that market's row lock (see
:mod:`apps.orders.services`); money moves only through :mod:`apps.ledger.services`.
"""

from decimal import Decimal

import pgtrigger
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Q, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Mod, NullIf, Replace

from apps.core import triggers as enforced
from apps.ledger.amounts import is_exact
from apps.ledger.models import AmountField, Asset, JournalEntry

# Fee rates are fractions: 0.001 is 0.1 %.
RATE_MAX_DIGITS = 9
RATE_DECIMAL_PLACES = 8


def decimals_of(value: Decimal) -> int:
    """Decimal places ``value`` needs (``0.010`` -> 2, ``10`` -> 0): what PostgreSQL's ``min_scale`` returns."""
    exponent = value.normalize().as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


def market_precision_problems(*, base: Asset, quote: Asset, tick_size: Decimal, step_size: Decimal) -> dict[str, str]:
    """Why a tick and step are not allowed for ``base``/``quote`` ({field: message}, empty when valid).

    The rule of DESIGN.md section 2: ``decimals(tick) + decimals(step) <= quote.decimals``
    and ``decimals(step) <= base.decimals``, so ``qty * price`` of every fill is an
    exact amount of the quote asset and every quantity an exact amount of the base.
    """
    problems = {}
    if decimals_of(step_size) > base.decimals:
        problems["step_size"] = f"At most {base.decimals} decimal places ({base.code} precision)."
    if decimals_of(tick_size) + decimals_of(step_size) > quote.decimals:
        problems["tick_size"] = (
            f"Decimal places of tick ({decimals_of(tick_size)}) and step ({decimals_of(step_size)}) "
            f"exceed {quote.code}'s {quote.decimals}: qty * price would not be exact."
        )
    return problems


def market_symbol(base: Asset, quote: Asset) -> str:
    """A market's symbol: the base asset's code, a dash and the quote asset's (``BTC-USDT``). Without its dash it
    is the market's symbol in the Binance-compatible API and CCXT (``BTCUSDT``)."""
    return f"{base.code}-{quote.code}"


def market_symbol_problems(*, base: Asset, quote: Asset, symbol: str) -> dict[str, str]:
    """Why a new market of ``base``/``quote`` may not be listed as ``symbol`` ({field: message}, empty when it may).

    Its symbol names its assets (:func:`market_symbol`); one market per pair; and no two symbols read the same
    without their dash (``BTCU-SDT`` would take ``BTCUSDT``, the Binance API's and CCXT's name of ``BTC-USDT``,
    and orders sent for one would go to the other). The database refuses the last two by itself
    (``market_one_per_pair``, ``market_symbol_unique_without_dash``).
    """
    expected = market_symbol(base, quote)
    if symbol != expected:
        return {"symbol": f"Must be {expected}: the base asset's code, a dash, the quote asset's code."}
    pair = Market.objects.filter(base=base, quote=quote).first()
    if pair is not None:
        return {"quote": f"{pair.symbol} already trades {base.code} against {quote.code}."}
    plain = symbol.replace("-", "")
    clash = Market.objects.alias(plain=Replace("symbol", Value("-"), Value(""))).filter(plain=plain).first()
    if clash is not None:
        return {"base": f"{clash.symbol} already reads {plain} without its dash (its symbol in the Binance API)."}
    return {}


class MarketStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    HALTED = "halted", "Halted"


class Market(models.Model):
    """A spot market: ``base`` is bought and sold for ``quote`` (``BTC-USDT``: BTC priced in USDT).

    Prices are quote per one base, multiples of ``tick_size``; quantities are base
    amounts, multiples of ``step_size`` between ``min_qty`` and ``max_qty``; an order's
    notional (quote value) is at least ``min_notional``. ``market_order_price_band`` (percent,
    optional) is the price protection of market orders. ``sequence`` rises with every
    change of the book (each placement and cancel), for depth snapshots.
    """

    symbol = models.CharField(
        max_length=21,
        unique=True,
        validators=[RegexValidator(r"^[A-Z0-9]{2,10}-[A-Z0-9]{2,10}$", "BASE-QUOTE, such as BTC-USDT.")],
    )
    base = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="+")
    quote = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="+")
    tick_size = AmountField()
    step_size = AmountField()
    min_qty = AmountField()
    max_qty = AmountField()
    min_notional = AmountField(default=Decimal(0))
    market_order_price_band = models.DecimalField(
        max_digits=5,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0.01")), MaxValueValidator(Decimal("100"))],
        help_text="Price protection, in %: a market order fills no further than this from the best price it meets "
        "(the rest is released). Empty: no limit.",
    )
    status = models.CharField(max_length=16, choices=MarketStatus.choices, default=MarketStatus.ACTIVE)
    sequence = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["symbol"]
        constraints = [
            models.CheckConstraint(condition=~Q(base=F("quote")), name="market_base_differs_from_quote"),
            models.UniqueConstraint(fields=["base", "quote"], name="market_one_per_pair"),
            models.UniqueConstraint(Replace("symbol", Value("-"), Value("")), name="market_symbol_unique_without_dash"),
            models.CheckConstraint(condition=Q(tick_size__gt=0, step_size__gt=0), name="market_tick_step_positive"),
            models.CheckConstraint(
                condition=Q(min_qty__gt=0, max_qty__gte=F("min_qty"), min_notional__gte=0),
                name="market_filters_ordered",
            ),
            models.CheckConstraint(
                condition=Q(min_qty=F("min_qty") - Mod(F("min_qty"), F("step_size")))
                & Q(max_qty=F("max_qty") - Mod(F("max_qty"), F("step_size"))),
                name="market_qty_limits_multiple_of_step",
            ),
        ]
        triggers = [
            enforced.ReadOnly(name="shape_fixed", fields=["symbol", "base", "quote", "tick_size", "step_size"]),
            enforced.Trigger(  # tick, step and assets never change: checked when created (and min_notional)
                name="precision_rule",
                when=pgtrigger.Before,
                operation=pgtrigger.Insert | pgtrigger.UpdateOf("min_notional"),
                func="""
                IF min_scale(NEW.step_size) > (SELECT decimals FROM ledger_asset WHERE id = NEW.base_id)
                   OR min_scale(NEW.tick_size) + min_scale(NEW.step_size)
                      > (SELECT decimals FROM ledger_asset WHERE id = NEW.quote_id)
                   OR min_scale(NEW.min_notional) > (SELECT decimals FROM ledger_asset WHERE id = NEW.quote_id)
                THEN
                    RAISE EXCEPTION 'market %: tick % and step % break the precision rule', NEW.symbol,
                        NEW.tick_size, NEW.step_size USING ERRCODE = 'check_violation';
                END IF;
                RETURN NEW;
                """,
            ),
        ]

    def __str__(self) -> str:
        return self.symbol

    def clean(self) -> None:
        """Model validation (admin forms): a new market's symbol (named by its assets, unique, see
        :func:`market_symbol_problems`), the precision rule and the filters' order."""
        errors: dict[str, str] = {}
        if self.base_id and self.quote_id:
            if self.base_id == self.quote_id:
                errors["quote"] = "Must differ from the base asset."
            elif self._state.adding:
                self.symbol = self.symbol or market_symbol(self.base, self.quote)
                errors.update(market_symbol_problems(base=self.base, quote=self.quote, symbol=self.symbol))
            if self.base_id != self.quote_id and self.tick_size and self.step_size:
                errors.update(
                    market_precision_problems(
                        base=self.base, quote=self.quote, tick_size=self.tick_size, step_size=self.step_size
                    )
                )
            if self.min_notional is not None and not is_exact(self.min_notional, self.quote.decimals):
                errors["min_notional"] = f"At most {self.quote.decimals} decimal places."
        for name in ("tick_size", "step_size", "min_qty"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                errors[name] = "Must be greater than zero."
        if self.min_notional is not None and self.min_notional < 0:
            errors["min_notional"] = "Must be zero or more."
        if self.step_size and self.step_size > 0:
            for name in ("min_qty", "max_qty"):
                value = getattr(self, name)
                if value is not None and value % self.step_size:
                    errors[name] = "Must be a multiple of the step size."
        if self.min_qty is not None and self.max_qty is not None and self.max_qty < self.min_qty:
            errors["max_qty"] = "Must be at least the minimum quantity."
        if errors:
            raise ValidationError(errors)

    @property
    def is_active(self) -> bool:
        return self.status == MarketStatus.ACTIVE


class FeeSchedule(models.Model):
    """Maker and taker fee rates (fractions: ``0.001`` is 0.1 %); one schedule is the default.

    Users without a :class:`UserFeeTier` pay the default; the rates in force at fill time
    are recorded on each trade.
    """

    name = models.CharField(max_length=64, unique=True)
    maker_rate = models.DecimalField(max_digits=RATE_MAX_DIGITS, decimal_places=RATE_DECIMAL_PLACES)
    taker_rate = models.DecimalField(max_digits=RATE_MAX_DIGITS, decimal_places=RATE_DECIMAL_PLACES)
    is_default = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=Q(is_default=True), name="one_default_fee_schedule"
            ),
            models.CheckConstraint(
                condition=Q(maker_rate__gte=0, maker_rate__lt=1, taker_rate__gte=0, taker_rate__lt=1),
                name="fee_rates_between_0_and_1",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (maker {self.maker_rate:%}, taker {self.taker_rate:%})"


class UserFeeTier(models.Model):
    """The fee schedule a user pays instead of the default (a volume tier, a market maker's deal)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="fee_tier")
    schedule = models.ForeignKey(FeeSchedule, on_delete=models.PROTECT, related_name="tiers")

    def __str__(self) -> str:
        return f"{self.user} -> {self.schedule.name}"


class Side(models.TextChoices):
    BUY = "buy", "Buy"
    SELL = "sell", "Sell"


class OrderType(models.TextChoices):
    LIMIT = "limit", "Limit"
    MARKET = "market", "Market"


class TimeInForce(models.TextChoices):
    GTC = "GTC", "Good till cancelled"
    IOC = "IOC", "Immediate or cancel"
    FOK = "FOK", "Fill or kill"


class SelfTradePrevention(models.TextChoices):
    EXPIRE_TAKER = "expire_taker", "Expire taker"
    EXPIRE_MAKER = "expire_maker", "Expire maker"
    EXPIRE_BOTH = "expire_both", "Expire both"


class OrderStatus(models.TextChoices):
    OPEN = "open", "Open"
    PARTIALLY_FILLED = "partially_filled", "Partially filled"
    FILLED = "filled", "Filled"
    CANCELLED = "cancelled", "Cancelled"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"


OPEN_STATUSES = (OrderStatus.OPEN, OrderStatus.PARTIALLY_FILLED)
ENDED_STATUSES = (OrderStatus.FILLED, OrderStatus.CANCELLED, OrderStatus.REJECTED, OrderStatus.EXPIRED)


class EndReason(models.TextChoices):
    """Why an order ended other than by filling (``Order.reject_reason``)."""

    NONE = "", "-"
    CANCELLED = "cancelled", "Cancelled by its owner"
    CANCELLED_BY_OPERATOR = "cancelled_by_operator", "Cancelled by an operator"
    SELF_TRADE_PREVENTION = "self_trade_prevention", "Self-trade prevention"
    UNFILLED_REMAINDER = "unfilled_remainder", "Immediate-or-cancel remainder"
    NO_LIQUIDITY = "no_liquidity", "Book exhausted"
    PRICE_PROTECTION = "price_protection", "Beyond the market's price protection"


class Order(models.Model):
    """An order of one user on one market, with what it has filled and what it still holds.

    Amounts: ``price`` in quote per base; ``qty`` and ``filled_qty`` in base;
    ``quote_qty`` (a market buy's budget) and ``filled_quote_qty`` in quote; ``fee_total``
    in the asset the order receives (base for a buy, quote for a sell). ``held_asset`` is
    the asset it holds (quote for a buy, base for a sell): ``held_amount`` was held at
    placement, ``held_remaining`` is still held. Each fill lowers ``held_remaining`` by what
    it consumed at the maker's price; the release moves exactly what is left, so a
    buyer's price improvement comes back.
    """

    # Foreign keys without their own index where a composite index below starts with them (or, for
    # held_asset, nothing looks orders up by it): every order INSERT and fill UPDATE maintains each index.
    market = models.ForeignKey(Market, on_delete=models.PROTECT, related_name="orders", db_index=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="orders", db_index=False)
    client_order_id = models.CharField(max_length=64, blank=True)
    side = models.CharField(max_length=4, choices=Side.choices)
    type = models.CharField(max_length=8, choices=OrderType.choices)
    price = AmountField(null=True, blank=True)
    qty = AmountField(null=True, blank=True)
    quote_qty = AmountField(null=True, blank=True)
    time_in_force = models.CharField(max_length=3, choices=TimeInForce.choices, default=TimeInForce.GTC)
    post_only = models.BooleanField(default=False)
    stp = models.CharField(max_length=16, choices=SelfTradePrevention.choices, default=SelfTradePrevention.EXPIRE_TAKER)
    status = models.CharField(max_length=16, choices=OrderStatus.choices)
    reject_reason = models.CharField(max_length=32, choices=EndReason.choices, blank=True, default="")
    filled_qty = AmountField(default=Decimal(0))
    filled_quote_qty = AmountField(default=Decimal(0))
    fee_total = AmountField(default=Decimal(0))
    held_asset = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="+", db_index=False)
    held_amount = AmountField(default=Decimal(0))
    held_remaining = AmountField(default=Decimal(0))
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["-id"]
        permissions = [("cancel_order", "Can cancel a customer's open order")]
        indexes = [
            # The book: open orders by price-time priority (asks ascending, bids descending).
            models.Index(
                fields=["market", "price", "id"],
                condition=Q(side="sell", status__in=OPEN_STATUSES),
                name="order_book_asks",
            ),
            models.Index(
                fields=["market", "-price", "id"],
                condition=Q(side="buy", status__in=OPEN_STATUSES),
                name="order_book_bids",
            ),
            models.Index(fields=["user", "-id"], name="order_user_id"),
            models.Index(fields=["user", "held_asset"], condition=Q(status__in=OPEN_STATUSES), name="order_open_holds"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "client_order_id"], condition=~Q(client_order_id=""), name="order_client_id_per_user"
            ),
            models.CheckConstraint(
                # NULL makes a comparison unknown, which a CHECK lets pass: say isnull=False explicitly.
                condition=(
                    Q(
                        type="limit",
                        price__isnull=False,
                        price__gt=0,
                        qty__isnull=False,
                        qty__gt=0,
                        quote_qty__isnull=True,
                    )
                    | Q(type="market", price__isnull=True, qty__isnull=False, qty__gt=0, quote_qty__isnull=True)
                    | Q(
                        type="market",
                        side="buy",
                        price__isnull=True,
                        qty__isnull=True,
                        quote_qty__isnull=False,
                        quote_qty__gt=0,
                    )
                ),
                name="order_shape_matches_type",
            ),
            models.CheckConstraint(
                condition=Q(type="limit") | Q(time_in_force__in=["IOC", "FOK"]),
                name="order_market_is_immediate",
            ),
            models.CheckConstraint(
                condition=Q(post_only=False) | Q(type="limit", time_in_force="GTC"),
                name="order_post_only_is_gtc_limit",
            ),
            models.CheckConstraint(
                condition=Q(
                    filled_qty__gte=0,
                    filled_quote_qty__gte=0,
                    fee_total__gte=0,
                    held_remaining__gte=0,
                    held_amount__gte=F("held_remaining"),
                ),
                name="order_amounts_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(qty__isnull=True) | Q(filled_qty__lte=F("qty")), name="order_filled_within_qty"
            ),
            models.CheckConstraint(
                condition=Q(quote_qty__isnull=True) | Q(filled_quote_qty__lte=F("quote_qty")),
                name="order_filled_within_budget",
            ),
            # Invariant 8: an ended order has no remaining hold.
            models.CheckConstraint(
                condition=Q(status__in=OPEN_STATUSES) | Q(held_remaining=0), name="order_ended_holds_nothing"
            ),
            models.CheckConstraint(
                condition=~Q(status__in=OPEN_STATUSES) | Q(type="limit", time_in_force="GTC", held_remaining__gt=0),
                name="order_only_gtc_limit_rests",
            ),
            models.CheckConstraint(condition=~Q(status="open") | Q(filled_qty=0), name="order_open_has_no_fill"),
            models.CheckConstraint(
                condition=~Q(status="partially_filled")
                | Q(qty__isnull=False, filled_qty__gt=0, filled_qty__lt=F("qty")),
                name="order_partially_filled_in_between",
            ),
            models.CheckConstraint(
                condition=~Q(status="filled") | Q(filled_qty__gt=0) & (Q(qty__isnull=True) | Q(filled_qty=F("qty"))),
                name="order_filled_means_filled",
            ),
            models.CheckConstraint(
                condition=~Q(status="filled") | Q(reject_reason=""), name="order_filled_has_no_end_reason"
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.id} {self.side} {self.type} {self.market_id}"

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES

    @property
    def average_price(self) -> Decimal | None:
        """The average fill price in quote per base (``filled_quote_qty / filled_qty``); ``None`` before a fill.

        A quotient, so not necessarily a multiple of the tick: for showing, never for arithmetic.
        """
        return self.filled_quote_qty / self.filled_qty if self.filled_qty else None

    @property
    def remaining_qty(self) -> Decimal | None:
        """Base quantity still to fill (``None`` for a market buy by quote budget)."""
        return None if self.qty is None else self.qty - self.filled_qty


# A trade's integer number (Binance's streams and /api/v3/ need integer trade ids rising per market):
# taker_order_id * TRADE_NUMBER_BASE + seq. A fill number stays below it: one placement would otherwise
# meet a million resting orders in one transaction.
TRADE_NUMBER_BASE = 10**6


class Trade(models.Model):
    """One fill: ``qty`` base at the maker's ``price``, ``quote_qty = qty * price`` in quote.

    ``id`` is deterministic: ``<taker order id>-<fill number>`` (fills numbered from 1 in
    matching order), and the fill's journal entry has the key ``trade:<id>``. Fees are in
    the asset each side receives (the buyer pays in base, the seller in quote), rounded
    up to its precision; the rates in force are recorded.
    """

    id = models.CharField(primary_key=True, max_length=40)
    # Covered by the composite indexes below (the unique one for taker_order).
    market = models.ForeignKey(Market, on_delete=models.PROTECT, related_name="trades", db_index=False)
    taker_order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="taker_trades", db_index=False)
    maker_order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="maker_trades", db_index=False)
    seq = models.PositiveIntegerField()
    taker_user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False)
    maker_user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False)
    taker_side = models.CharField(max_length=4, choices=Side.choices)
    price = AmountField()
    qty = AmountField()
    quote_qty = AmountField()
    taker_fee = AmountField()
    maker_fee = AmountField()
    taker_fee_rate = models.DecimalField(max_digits=RATE_MAX_DIGITS, decimal_places=RATE_DECIMAL_PLACES)
    maker_fee_rate = models.DecimalField(max_digits=RATE_MAX_DIGITS, decimal_places=RATE_DECIMAL_PLACES)
    entry = models.OneToOneField(JournalEntry, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-taker_order_id", "-seq"]
        indexes = [
            models.Index(fields=["market", "-taker_order", "-seq"], name="trade_market_recent"),
            # The market's trades by time: the 24-hour ticker's window edges (apps.marketdata.selectors).
            models.Index(fields=["market", "created_at"], name="trade_market_time"),
            models.Index(fields=["taker_user", "-created_at"], name="trade_taker_user"),
            models.Index(fields=["maker_user", "-created_at"], name="trade_maker_user"),
            models.Index(fields=["maker_order"], name="trade_maker_order"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["taker_order", "seq"], name="trade_one_per_fill_number"),
            models.CheckConstraint(condition=Q(price__gt=0, qty__gt=0), name="trade_price_qty_positive"),
            models.CheckConstraint(condition=Q(quote_qty=F("qty") * F("price")), name="trade_quote_is_qty_times_price"),
            models.CheckConstraint(condition=Q(taker_fee__gte=0, maker_fee__gte=0), name="trade_fees_not_negative"),
            models.CheckConstraint(condition=~Q(taker_user=F("maker_user")), name="trade_not_self"),
            models.CheckConstraint(condition=~Q(taker_order=F("maker_order")), name="trade_two_orders"),
        ]
        triggers = [enforced.append_only()]

    def __str__(self) -> str:
        return f"trade {self.id}"

    @property
    def number(self) -> int:
        """The integer id of the trade (``TRADE_NUMBER_BASE``), as the streams and the Binance API show it."""
        return self.taker_order_id * TRADE_NUMBER_BASE + self.seq

    @property
    def buyer_id(self) -> int:
        return self.taker_user_id if self.taker_side == Side.BUY else self.maker_user_id

    @property
    def seller_id(self) -> int:
        return self.maker_user_id if self.taker_side == Side.BUY else self.taker_user_id


class CommandKind(models.TextChoices):
    PLACE = "place", "Place an order"
    CANCEL = "cancel", "Cancel an order"
    CANCEL_ALL = "cancel_all", "Cancel a user's open orders"
    HALT = "halt", "Halt the market"
    RESUME = "resume", "Resume the market"


class CommandStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DONE = "done", "Done"


PENDING_CLIENT_ORDER_ID = NullIf(KT("payload__client_order_id"), Value(""), output_field=models.TextField())
"""A placement command's ``client_order_id`` (its payload's), ``NULL`` when it has none: the expression of the
``command_pending_client_order_id`` index, which a lookup must name alike to use it."""


class Command(models.Model):
    """A placement, cancel, cancel of a user's open orders, halt or resume handed to its market's sequencer
    (``manage.py run_engine``).

    Written (committed) by the caller before it waits, so it survives any process dying;
    the sequencer applies pending commands in id order and, in the same transaction as
    their effects, marks them ``done`` with their ``outcome`` (``{"order_id": n}``, ``{"order_ids": [n, ...]}``
    for a cancel of a user's open orders, or ``{"error": {"type", "message", "fields"}}``), so each is applied
    exactly once.
    ``key`` (an ``Idempotency-Key``, optional) is unique per user: a retry under it finds
    the first command instead of adding one. ``token`` (unique) names the command in its
    answer; ``reply_to`` is the Redis channel of the waiting caller's thread that answer is
    published on (:mod:`apps.orders.services.answers`; empty: nobody listens, the caller reads
    the outcome from the database).
    """

    market = models.ForeignKey(Market, on_delete=models.PROTECT, related_name="+", db_index=False)
    kind = models.CharField(max_length=16, choices=CommandKind.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False)
    key = models.CharField(max_length=255, blank=True, default="")
    request_hash = models.CharField(max_length=64)
    token = models.CharField(max_length=32, unique=True)
    reply_to = models.CharField(max_length=64, blank=True, default="")
    payload = models.JSONField()
    status = models.CharField(max_length=8, choices=CommandStatus.choices, default=CommandStatus.PENDING)
    outcome = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["market", "id"], condition=Q(status="pending"), name="command_pending_per_market"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], condition=~Q(key=""), name="command_key_per_user"),
            # One queued placement per user and client order id: a second, for this or another market, waits for
            # the first's outcome or is a conflict, and never reaches another sequencer's batch, where the
            # orders' unique client id failed the whole batch (break-it review).
            models.UniqueConstraint(
                F("user"),
                PENDING_CLIENT_ORDER_ID,
                condition=Q(status="pending", kind="place"),
                name="command_pending_client_order_id",
            ),
            models.CheckConstraint(
                condition=Q(status="pending", outcome__isnull=True, done_at__isnull=True)
                | Q(status="done", outcome__isnull=False, done_at__isnull=False),
                name="command_done_has_outcome",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} command {self.id}"
