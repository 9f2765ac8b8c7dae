"""Back-office screens: markets (halt and resume); fee schedules and tiers, orders and trades read-only.

Actions call services (:mod:`apps.orders.services`); nothing here moves money or
writes an order.
"""

from django.contrib import admin, messages
from django.core.exceptions import ValidationError

from apps.backoffice.services import audit_record
from apps.ledger.admin import ReadOnlyAdmin
from apps.ledger.amounts import format_amount
from apps.ledger.errors import DomainError

from .models import FeeSchedule, Market, Order, Trade, UserFeeTier
from .services import market_create, market_filters_update, market_halt, market_resume

MARKET_SHAPE = ("symbol", "base", "quote", "tick_size", "step_size")


def _market_state(market: Market) -> dict:
    return {
        "status": market.status,
        "min_qty": str(market.min_qty),
        "max_qty": str(market.max_qty),
        "min_notional": str(market.min_notional),
    }


def _audit(request, action: str, market: Market, before: dict) -> None:
    audit_record(
        actor_id=request.user.id,
        action=action,
        object_type="orders.market",
        object_id=market.pk,
        before=before,
        after=_market_state(market),
    )


@admin.register(Market)
class MarketAdmin(admin.ModelAdmin):
    """Markets: created through :func:`market_create`; tick, step and assets fixed afterwards."""

    list_display = (
        "symbol",
        "base",
        "quote",
        "tick_size",
        "step_size",
        "min_qty",
        "max_qty",
        "min_notional",
        "status",
        "sequence",
    )
    list_filter = ("status",)
    search_fields = ("symbol",)
    fields = (*MARKET_SHAPE, "min_qty", "max_qty", "min_notional", "status", "sequence")
    actions = ("halt", "resume")

    def get_readonly_fields(self, request, obj=None):
        return (*MARKET_SHAPE, "status", "sequence") if obj else ("status", "sequence")

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        before = _market_state(Market.objects.get(pk=obj.pk)) if change else {}
        try:
            if change:
                market_filters_update(
                    market_id=obj.id,
                    min_qty=data["min_qty"],
                    max_qty=data["max_qty"],
                    min_notional=data["min_notional"],
                )
            else:
                created = market_create(
                    symbol=data["symbol"],
                    base=data["base"],
                    quote=data["quote"],
                    tick_size=data["tick_size"],
                    step_size=data["step_size"],
                    min_qty=data["min_qty"],
                    max_qty=data["max_qty"],
                    min_notional=data["min_notional"],
                )
                obj.pk = created.pk
        except DomainError as exc:  # form validation (Market.clean) catches these first
            raise ValidationError(exc.fields or exc.message) from exc
        _audit(request, "market.update" if change else "market.create", Market.objects.get(pk=obj.pk), before)

    @admin.action(
        description="Halt the selected markets (refuse new orders; cancels still work)", permissions=["change"]
    )
    def halt(self, request, queryset):
        for market in queryset:
            _audit(request, "market.halt", market_halt(market_id=market.id), _market_state(market))
        self.message_user(request, f"Halted {queryset.count()} market(s).", messages.SUCCESS)

    @admin.action(description="Resume the selected markets", permissions=["change"])
    def resume(self, request, queryset):
        for market in queryset:
            _audit(request, "market.resume", market_resume(market_id=market.id), _market_state(market))
        self.message_user(request, f"Resumed {queryset.count()} market(s).", messages.SUCCESS)


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
        "market",
        "user",
        "side",
        "type",
        "price_display",
        "qty",
        "quote_qty",
        "filled_qty",
        "time_in_force",
        "status",
        "reject_reason",
        "held_remaining_display",
    )
    list_filter = ("market", "status", "side", "type", "time_in_force")
    search_fields = ("=id", "user__username", "client_order_id")
    list_select_related = ("market__quote", "user", "held_asset")
    date_hierarchy = "created_at"

    @admin.display(description="price", ordering="price")
    def price_display(self, order):
        return "market" if order.price is None else format_amount(order.price, order.market.quote.decimals)

    @admin.display(description="held remaining", ordering="held_remaining")
    def held_remaining_display(self, order):
        return f"{format_amount(order.held_remaining, order.held_asset.decimals)} {order.held_asset.code}"


@admin.register(Trade)
class TradeAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "created_at",
        "market",
        "taker_side",
        "price",
        "qty",
        "quote_qty",
        "taker_order",
        "maker_order",
        "taker_fee",
        "maker_fee",
        "taker_fee_rate",
        "maker_fee_rate",
        "entry",
    )
    list_filter = ("market", "taker_side")
    search_fields = ("=id", "=taker_order__id", "=maker_order__id", "taker_user__username", "maker_user__username")
    list_select_related = ("market", "taker_order", "maker_order", "entry")
    date_hierarchy = "created_at"
