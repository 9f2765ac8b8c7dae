"""The traders' market pages: the markets list, and per market the book, trades, the order form and the
user's orders and fills. Thin views over :mod:`apps.orders.selectors` and :mod:`apps.orders.services`.

The market page is rendered whole (it reads without JavaScript); ``static/js/market.js`` then keeps
the book, the depth and price charts, trades, the 24-hour strip, balances and open orders live from
the WebSocket streams (:mod:`apps.streams`), with no polling.
"""

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from apps.core.errors import DomainError, NotFound
from apps.ledger.errors import IdempotencyConflict
from apps.ledger.selectors import balances_for_user
from apps.marketdata.models import Interval
from apps.marketdata.selectors import Ticker, candles, ticker_24h, tickers_24h
from apps.orders.errors import OrderStatusUnknown
from apps.orders.models import Market, decimals_of
from apps.orders.selectors import (
    fills_for_user,
    market_get,
    order_book_depth,
    orders_for_user,
    recent_trades,
)
from apps.orders.services import order_cancel, order_place
from apps.streams.selectors import stream_symbol

from .forms import OrderForm, add_domain_error, with_new_key
from .order_messages import order_placed_message
from .refused import refused_form_keep, refused_form_pop
from .sparkline import HOURS, Sparkline, sparkline

BOOK_LEVELS = 12
RECENT_TRADES = 25
MY_ROWS = 50


@dataclass(frozen=True)
class MarketSummary:
    """A row of the markets list: the market, its last trade price and best bid and ask (``None`` if none),
    its 24-hour ticker and the price line of its last 24 hourly candles (``None`` without trades)."""

    market: Market
    last_price: Decimal | None
    best_bid: Decimal | None
    best_ask: Decimal | None
    ticker: Ticker
    sparkline: Sparkline | None


def markets(request):
    """Every market with its last price, best bid and ask, 24-hour change and volume, and a price line."""
    now = timezone.now()
    start = (now - timedelta(hours=HOURS - 1)).replace(minute=0, second=0, microsecond=0)
    rows = [
        MarketSummary(
            market=ticker.market,
            last_price=ticker.last,
            best_bid=ticker.bid,
            best_ask=ticker.ask,
            ticker=ticker,
            sparkline=sparkline(candles(market=ticker.symbol, interval=Interval.H1, start=start), start=start),
        )
        for ticker in tickers_24h(now=now)
    ]
    return render(request, "web/markets.html", {"rows": rows})


def _market_or_404(symbol: str) -> Market:
    try:
        return market_get(symbol=symbol)
    except NotFound:
        raise Http404(f"No market {symbol}.") from None


def _live_context(request, market: Market) -> dict:
    """What the page shows first: the book, recent trades and, for a logged-in user, balances and open orders."""
    depth = order_book_depth(market=market.symbol, limit=BOOK_LEVELS)
    context = {
        "market": market,
        "asks": list(reversed(depth.asks)),  # best ask last: next to the spread
        "bids": depth.bids,
        "trades": recent_trades(market=market.symbol, limit=RECENT_TRADES),
    }
    if request.user.is_authenticated:
        codes = (market.base.code, market.quote.code)
        context["balances"] = [b for b in balances_for_user(request.user.id) if b.asset in codes]
        context["open_orders"] = list(
            orders_for_user(user_id=request.user.id, market=market.symbol, status="open")[:MY_ROWS]
        )
    return context


def _render_market(request, market: Market, form: forms.Form | None = None):
    context = _live_context(request, market)
    context["ticker"] = ticker_24h(market=market.symbol)
    context["intervals"] = Interval.values
    context["streams_url"] = settings.STREAMS_URL
    context["stream_symbol"] = stream_symbol(market.symbol)
    context["price_places"] = decimals_of(market.tick_size)
    if request.user.is_authenticated:
        context["form"] = form or OrderForm(market=market)
        context["closed_orders"] = list(
            orders_for_user(user_id=request.user.id, market=market.symbol, status="closed")[:MY_ROWS]
        )
        context["fills"] = fills_for_user(user_id=request.user.id, market=market.symbol, limit=MY_ROWS)
    response = render(request, "web/market.html", context)
    if settings.STREAMS_URL:
        # The streams may be served from another origin (uvicorn on its own port): the page's script may connect
        # there, and only there, beside 'self' (Content-Security-Policy connect-src).
        # django-csp reads this attribute off the response; HttpResponse's stubs do not know it.
        response._csp_update = {"connect-src": [_origin(settings.STREAMS_URL)]}  # type: ignore[attr-defined]
    return response


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (the streams' WebSocket URL)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def market(request, symbol: str):
    """A market's page: rendered whole, then kept live by ``static/js/market.js`` from the streams."""
    found = _market_or_404(symbol)
    refused = None
    if request.user.is_authenticated:
        refused = refused_form_pop(request, key=_order_form_key(found), form_class=OrderForm, market=found)
    return _render_market(request, found, form=refused)


PLACEMENT_UNKNOWN = (
    "Your order was sent, but the matching engine has not answered yet: it may still be placed. Check your open "
    "orders and history in a moment. Sending this same form again never places it twice."
)
"""The order form's answer to :class:`OrderStatusUnknown` (the form keeps its ``client_order_id``, so a resend is
answered with the order the first placed, once the engine applies it)."""

CANCEL_UNKNOWN = (
    "The cancel of order #{order_id} was sent, but the matching engine has not answered yet: it may still be "
    "cancelled (or fill first). Check your open orders in a moment."
)


def _order_form_key(market: Market) -> str:
    return f"order:{market.symbol}"


@login_required
@require_POST
def order_place_view(request, symbol: str):
    """Place the order of the market page's form; a refused form goes back to the market page (post/redirect/get)
    with each refusal next to the field at fault."""
    found = _market_or_404(symbol)
    form = OrderForm(request.POST, market=found)
    if form.is_valid():
        try:
            order = order_place(user_id=request.user.id, market=found.symbol, **form.order_arguments())
        except IdempotencyConflict:
            form = with_new_key(
                form,
                "client_order_id",
                "An order was already placed from this form with other "
                "values (see your orders). Nothing was placed now; send the form again to place "
                "this one too.",
                market=found,
            )
        except OrderStatusUnknown:
            form.add_error(None, PLACEMENT_UNKNOWN)
        except DomainError as error:
            add_domain_error(form, error)
        else:
            messages.success(request, order_placed_message(order, found))
            return redirect("web:market", symbol=found.symbol)
    refused_form_keep(request, key=_order_form_key(found), form=form)
    return redirect("web:market", symbol=found.symbol)


@login_required
@require_POST
def order_cancel_view(request, order_id: int):
    """Cancel one of the user's open orders, then back to its market page."""
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = reverse("web:markets")
    try:
        order = order_cancel(order_id=order_id, user_id=request.user.id)
    except OrderStatusUnknown:
        messages.warning(request, CANCEL_UNKNOWN.format(order_id=order_id))
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Order #{order.id} cancelled.")
    return redirect(target)
