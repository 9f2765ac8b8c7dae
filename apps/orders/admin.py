"""Back-office screens: markets (halt and resume; their filters change through maker-checker market changes,
:mod:`apps.backoffice.market_admin`); fee schedules and tiers, trades read-only; orders read-only but for an
operator's cancel (with a reason, audited).

Actions call services (:mod:`apps.orders.services`); nothing here moves money or
writes an order.
"""

import time
from decimal import Decimal

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from apps.audit.services import audit_record
from apps.core.errors import DomainError
from apps.ledger.admin import ReadOnlyAdmin, amount_column, amount_html

from .errors import OrderStatusUnknown
from .models import FeeSchedule, Market, Order, Trade, UserFeeTier
from .services import (
    market_create,
    market_halt,
    market_resume,
    market_state,
    order_cancel_by_operator,
)

MARKET_SHAPE = ("symbol", "base", "quote", "tick_size", "step_size")
MARKET_FILTERS = ("min_qty", "max_qty", "min_notional", "market_order_price_band")
# What the add form proposes for market orders' price protection (in %): the operator sees it and may clear it.
# A proposal, not a default of market_create, where an empty band means "no protection" for every caller.
NEW_MARKET_PRICE_BAND = Decimal("5")


class _NotSaved(Exception):
    """Raised out of :meth:`MarketAdmin.save_model` (so the admin's transaction rolls back) for a service refusal."""

    def __init__(self, refused: DomainError):
        super().__init__(refused.message)
        self.refused = refused


@admin.register(Market)
class MarketAdmin(admin.ModelAdmin):
    """Markets: created through :func:`market_create`; tick, step and assets fixed afterwards, the filters changed by a
    market change that another operator approves (:class:`apps.backoffice.models.MarketChange`)."""

    list_display = (
        "symbol",
        "tick_display",
        "step_display",
        "min_qty_display",
        "max_qty_display",
        "min_notional_display",
        "status",
        "sequence",
    )
    list_filter = ("status",)
    list_select_related = ("base", "quote")
    tick_display = amount_column("tick_size", lambda market: market.quote, "tick size", exact=True)
    step_display = amount_column("step_size", lambda market: market.base, "step size", exact=True)
    min_qty_display = amount_column("min_qty", lambda market: market.base, "min quantity", exact=True)
    max_qty_display = amount_column("max_qty", lambda market: market.base, "max quantity", exact=True)
    min_notional_display = amount_column("min_notional", lambda market: market.quote, "min notional", exact=True)
    search_fields = ("symbol",)
    actions = ("halt", "resume")

    def get_fields(self, request, obj=None):
        return (*MARKET_SHAPE, *MARKET_FILTERS, "status", "sequence", *(("filters_change",) if obj else ()))

    def get_readonly_fields(self, request, obj=None):
        # A new market's symbol is its assets' codes (Market.clean, market_create): never typed.
        if obj is None:
            return ("symbol", "status", "sequence")
        return (*MARKET_SHAPE, *MARKET_FILTERS, "status", "sequence", "filters_change")

    @admin.display(description="Change the filters")
    def filters_change(self, market):
        return format_html(
            '<a href="{}?market={}">Draft a change of these filters</a> (applied when another operator approves it)',
            reverse("admin:backoffice_marketchange_add"),
            market.pk,
        )

    def get_changeform_initial_data(self, request):
        return {"market_order_price_band": NEW_MARKET_PRICE_BAND, **super().get_changeform_initial_data(request)}

    def has_delete_permission(self, request, obj=None):
        return False

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """A market's page, read-only: its filters change through a drafted market change (``filters_change``), so
        a POST here is refused (halts and resumes are the list's actions)."""
        if request.method == "POST":
            raise DjangoPermissionDenied
        read_only = {"show_save": False, "show_save_and_continue": False, "show_save_and_add_another": False}
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), **read_only})

    def save_model(self, request, obj, form, change):
        """Create the market (the add form; :meth:`change_view` saves nothing), audited as ``market.create``."""
        data = form.cleaned_data
        try:
            created = market_create(
                base=data["base"],
                quote=data["quote"],
                tick_size=data["tick_size"],
                step_size=data["step_size"],
                min_qty=data["min_qty"],
                max_qty=data["max_qty"],
                min_notional=data["min_notional"],
                market_order_price_band=data["market_order_price_band"],
            )
        except DomainError as refused:  # form validation (Market.clean) catches these first, bar a race
            raise _NotSaved(refused) from refused
        obj.pk = created.pk
        audit_record(
            actor_id=request.user.id,
            action="market.create",
            object_type="orders.market",
            object_id=created.pk,
            before={},
            after=market_state(created),
        )

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        """The admin's form view; a save the service refused after the form's checks passed (another operator
        listed the same market at that moment) rolls back and shows the form again with the reason."""
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except _NotSaved as not_saved:
            refused = not_saved.refused
            reasons = " ".join([refused.message, *refused.fields.values()])
            self.message_user(request, f"Not saved: {reasons}", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def _confirm_status_change(self, request, queryset, *, action: str, service, done: str):
        """An action's confirmation page asking for a reason; with ``confirm`` and a reason, apply ``service``
        to each selected market (each audited with the reason in its own transaction; :func:`_apply_each`)."""
        reason = request.POST.get("reason", "").strip()
        if request.POST.get("confirm") == "yes" and reason:
            applied, unconfirmed, refused = _apply_each(
                queryset,
                lambda market, wait: service(
                    market_id=market.id, operator_id=request.user.id, reason=reason, wait_seconds=wait
                ),
                label=lambda market: market.symbol,
            )
            _report_each(self, request, applied, unconfirmed, refused, done=done, action=action, noun="market")
            return None
        description = (
            "Halting refuses every new order on these markets; open orders stay in the book and can still be cancelled."
            if action == "halt"
            else "Resuming accepts new orders on these markets again."
        )
        items = [(market.pk, f"{market.symbol} ({market.get_status_display().lower()})") for market in queryset]
        return _confirmation(
            self, request, title=f"{action.capitalize()} markets", action=action, items=items, description=description
        )

    @admin.action(
        description="Halt the selected markets (refuse new orders; cancels still work)", permissions=["change"]
    )
    def halt(self, request, queryset):
        return self._confirm_status_change(request, queryset, action="halt", service=market_halt, done="Halted")

    @admin.action(description="Resume the selected markets", permissions=["change"])
    def resume(self, request, queryset):
        return self._confirm_status_change(request, queryset, action="resume", service=market_resume, done="Resumed")


def _apply_each(items, apply, *, label) -> tuple[list[str], list[str], list[str]]:
    """``apply(item, wait_seconds)`` for each of ``items`` (a service that goes through the matching engine);
    return the labels applied, the labels queued but not confirmed, and the refusals (``"<label>: <why>"``).

    The engine's answers are awaited ``ORDERS_ENGINE_WAIT_SECONDS`` in all, not per item: with the engine down,
    the page answers after one wait, the rest of the commands queued."""
    applied, unconfirmed, refused = [], [], []
    deadline = time.monotonic() + settings.ORDERS_ENGINE_WAIT_SECONDS
    for item in items:
        try:
            apply(item, max(0.0, deadline - time.monotonic()))
        except OrderStatusUnknown:  # queued for the market's sequencer, which did not answer in time
            unconfirmed.append(label(item))
        except DomainError as error:
            refused.append(f"{label(item)}: {error.message}")
        else:
            applied.append(label(item))
    return applied, unconfirmed, refused


def _report_each(model_admin, request, applied, unconfirmed, refused, *, done: str, action: str, noun: str) -> None:
    """Tell the operator what :func:`_apply_each` did: ``done`` (a past participle) for the applied, the refusals,
    and the ``action`` still queued for the engine (check the ``noun``'s state before acting again)."""
    if applied:
        shown = ", ".join(applied)
        model_admin.message_user(request, f"{done} {shown}. Reason recorded in the audit log.", messages.SUCCESS)
    for refusal in refused:
        model_admin.message_user(request, f"Not {done.lower()}: {refusal}", messages.ERROR)
    if unconfirmed:
        model_admin.message_user(
            request,
            f"The {action} of {', '.join(unconfirmed)} is queued for the matching engine, which has not "
            "confirmed it yet: it takes effect (and is audited) when the engine applies it. "
            f"Check the {noun}'s status before acting again.",
            messages.WARNING,
        )


def _confirmation(
    model_admin, request, *, title: str, action: str, items: list[tuple[int, str]], description: str
) -> TemplateResponse:
    """An action's confirmation page: what it does (``description``), the selected ``items`` (``(pk, label)``) and
    a reason to give (refused empty, ``missing_reason``)."""
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "opts": opts,
        "action": action,
        "items": items,
        "description": description,
        "back_url": reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"),
        "action_name": request.POST.get("action", ""),
        "missing_reason": request.POST.get("confirm") == "yes",
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "admin/orders/confirm_with_reason.html", context)


class UserFeeTierInline(admin.TabularInline):
    model = UserFeeTier
    extra = 0
    fields = ("user",)
    readonly_fields = ("user",)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(FeeSchedule)
class FeeScheduleAdmin(ReadOnlyAdmin):
    """Fee schedules (rates are fractions: 0.001 = 0.1 %) and the users assigned to each, read-only.

    Every change (a new schedule, rates, the default, a user's tier) is a fee change drafted by
    one operator and approved by another (:mod:`apps.backoffice.fee_admin`).
    """

    list_display = ("name", "maker_rate", "taker_rate", "is_default", "updated_at")
    fields = ("name", "maker_rate", "taker_rate", "is_default", "updated_at")
    inlines = [UserFeeTierInline]
    change_form_template = "admin/orders/feeschedule/change_form.html"
    change_list_template = "admin/orders/feeschedule/change_list.html"

    def has_delete_permission(self, request, obj=None):
        # An unused schedule may go (a schedule users pay is protected by their tiers); never the default.
        return request.user.has_perm("orders.delete_feeschedule") and (obj is None or not obj.is_default)


@admin.register(Order)
class OrderAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "created_at",
        "user",
        "side_type",
        "price_display",
        "filled_of",
        "average_price_display",
        "status_display",
        "held_remaining_display",
    )
    list_filter = ("market", "status", "side", "type", "time_in_force")
    search_fields = ("=id", "user__username", "client_order_id")
    list_select_related = ("market__base", "market__quote", "user", "held_asset")
    date_hierarchy = "created_at"
    actions = ("cancel_orders",)

    def has_cancel_permission(self, request) -> bool:
        return request.user.has_perm("orders.cancel_order")

    @admin.action(description="Cancel the selected open orders (releases their holds)", permissions=["cancel"])
    def cancel_orders(self, request, queryset):
        """A confirmation page asking for a reason; with ``confirm`` and a reason, cancel each selected order
        (:func:`~apps.orders.services.order_cancel_by_operator`: audited with the reason in the transaction that
        cancels it), oldest first."""
        reason = request.POST.get("reason", "").strip()
        if request.POST.get("confirm") == "yes" and reason:
            cancelled, unconfirmed, refused = _apply_each(
                queryset.order_by("id"),
                lambda order, wait: order_cancel_by_operator(
                    order_id=order.id, operator_id=request.user.id, reason=reason, wait_seconds=wait
                ),
                label=lambda order: f"#{order.id}",
            )
            _report_each(
                self, request, cancelled, unconfirmed, refused, done="Cancelled", action="cancel", noun="order"
            )
            return None
        description = (
            "Cancelling releases each order's whole remaining hold to its owner, who sees it ended as \"cancelled by "
            'an operator".'
        )
        items = [
            (
                order.pk,
                f"#{order.pk} {order.market.symbol} of {order.user.username} ({order.get_status_display().lower()})",
            )
            for order in queryset.select_related("market", "user").order_by("id")
        ]
        return _confirmation(
            self, request, title="Cancel orders", action="cancel", items=items, description=description
        )

    @admin.display(description="price", ordering="price")
    def price_display(self, order):
        return "market" if order.price is None else amount_html(order.price, order.market.quote, exact=True)

    @admin.display(description="order", ordering="market")
    def side_type(self, order):
        return f"{order.market.symbol} {order.get_side_display().lower()} {order.get_type_display().lower()}"

    @admin.display(description="filled of quantity", ordering="filled_qty")
    def filled_of(self, order):
        filled = amount_html(order.filled_qty, order.market.base)
        if order.qty is None:
            return format_html("{} for a budget of {}", filled, amount_html(order.quote_qty, order.market.quote))
        return format_html("{} of {}", filled, amount_html(order.qty, order.market.base))

    @admin.display(description="average price")
    def average_price_display(self, order):
        average = order.average_price
        return "—" if average is None else amount_html(average, order.market.quote)

    @admin.display(description="status", ordering="status")
    def status_display(self, order):
        shown = f"{order.get_status_display()} ({order.time_in_force})"
        return f"{shown}: {order.get_reject_reason_display().lower()}" if order.reject_reason else shown

    held_remaining_display = amount_column("held_remaining", lambda order: order.held_asset, "held remaining")


def _fee_assets(trade: Trade) -> tuple:
    """``(taker fee asset, maker fee asset)``: each side pays in what it receives (the buyer base, the seller quote)."""
    base, quote = trade.market.base, trade.market.quote
    return (base, quote) if trade.taker_side == "buy" else (quote, base)


@admin.register(Trade)
class TradeAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "created_at",
        "market",
        "taker_side",
        "price_display",
        "qty_display",
        "quote_qty_display",
        "fees",
        "orders",
    )
    list_filter = ("market", "taker_side")
    search_fields = ("=id", "=taker_order__id", "=maker_order__id", "taker_user__username", "maker_user__username")
    list_select_related = ("market__base", "market__quote")
    date_hierarchy = "created_at"

    price_display = amount_column("price", lambda trade: trade.market.quote, "price", exact=True)
    qty_display = amount_column("qty", lambda trade: trade.market.base, "quantity")
    quote_qty_display = amount_column("quote_qty", lambda trade: trade.market.quote, "value")

    @admin.display(description="fees taker / maker")
    def fees(self, trade):
        taker_asset, maker_asset = _fee_assets(trade)
        return format_html(
            "{} / {}", amount_html(trade.taker_fee, taker_asset), amount_html(trade.maker_fee, maker_asset)
        )

    @admin.display(description="taker / maker order")
    def orders(self, trade):
        link = "admin:orders_order_change"
        return format_html(
            '<a href="{}">#{}</a> / <a href="{}">#{}</a>',
            reverse(link, args=[trade.taker_order_id]),
            trade.taker_order_id,
            reverse(link, args=[trade.maker_order_id]),
            trade.maker_order_id,
        )
