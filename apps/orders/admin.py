"""Back-office screens: markets (halt and resume), fee schedules and tiers, orders and trades read-only.

Actions call services (:mod:`apps.orders.services`); nothing here moves money or
writes an order.
"""

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.template.response import TemplateResponse

from apps.backoffice.services import audit_record
from apps.ledger.admin import ReadOnlyAdmin
from apps.ledger.amounts import format_amount
from apps.ledger.errors import DomainError

from .models import FeeSchedule, Market, Order, Trade, UserFeeTier
from .services import (
    fee_schedule_make_default,
    market_create,
    market_filters_update,
    market_halt,
    market_resume,
    market_state,
)

MARKET_SHAPE = ("symbol", "base", "quote", "tick_size", "step_size")


def _audit(request, action: str, market: Market, before: dict) -> None:
    audit_record(
        actor_id=request.user.id,
        action=action,
        object_type="orders.market",
        object_id=market.pk,
        before=before,
        after=market_state(market),
    )


def _schedule_state(schedule: FeeSchedule) -> dict:
    return {
        "name": schedule.name,
        "maker_rate": f"{schedule.maker_rate.normalize():f}",
        "taker_rate": f"{schedule.taker_rate.normalize():f}",
        "users": sorted(schedule.tiers.values_list("user__username", flat=True)) if schedule.pk else [],
    }


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
        before = market_state(Market.objects.get(pk=obj.pk)) if change else {}
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

    def _confirm_status_change(self, request, queryset, *, action: str, service, done: str):
        """An action's confirmation page asking for a reason; with ``confirm`` and a reason, apply ``service``
        to each selected market (each audited with the reason in its own transaction)."""
        reason = request.POST.get("reason", "").strip()
        if request.POST.get("confirm") == "yes" and reason:
            for market in queryset:
                service(market_id=market.id, operator_id=request.user.id, reason=reason)
            symbols = ", ".join(market.symbol for market in queryset)
            self.message_user(request, f"{done} {symbols}. Reason recorded in the audit log.", messages.SUCCESS)
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": f"{action.capitalize()} markets",
            "opts": self.model._meta,
            "markets": queryset,
            "action": action,
            "action_name": request.POST.get("action", ""),
            "missing_reason": request.POST.get("confirm") == "yes",
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/orders/market/confirm_status.html", context)

    @admin.action(
        description="Halt the selected markets (refuse new orders; cancels still work)", permissions=["change"]
    )
    def halt(self, request, queryset):
        return self._confirm_status_change(request, queryset, action="halt", service=market_halt, done="Halted")

    @admin.action(description="Resume the selected markets", permissions=["change"])
    def resume(self, request, queryset):
        return self._confirm_status_change(request, queryset, action="resume", service=market_resume, done="Resumed")


class UserFeeTierInline(admin.TabularInline):
    model = UserFeeTier
    extra = 0
    autocomplete_fields = ("user",)


@admin.register(FeeSchedule)
class FeeScheduleAdmin(admin.ModelAdmin):
    """Fee schedules (rates are fractions: 0.001 = 0.1 %) and the users assigned to each."""

    list_display = ("name", "maker_rate", "taker_rate", "is_default", "updated_at")
    fields = ("name", "maker_rate", "taker_rate", "is_default")
    readonly_fields = ("is_default",)
    inlines = [UserFeeTierInline]
    actions = ("make_default",)

    def has_delete_permission(self, request, obj=None):
        return obj is None or not obj.is_default

    def save_model(self, request, obj, form, change):
        # Runs before the tiers are saved: the database still holds the state before the change.
        request.fee_schedule_before = _schedule_state(FeeSchedule.objects.get(pk=obj.pk)) if change else {}
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        audit_record(
            actor_id=request.user.id,
            action="fee_schedule.update" if change else "fee_schedule.create",
            object_type="orders.feeschedule",
            object_id=form.instance.pk,
            before=request.fee_schedule_before,
            after=_schedule_state(form.instance),
        )

    @admin.action(description="Make the selected schedule the default", permissions=["change"])
    def make_default(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one schedule to make the default.", messages.ERROR)
            return
        previous = FeeSchedule.objects.filter(is_default=True).first()
        schedule = fee_schedule_make_default(schedule_id=queryset.get().id)
        audit_record(
            actor_id=request.user.id,
            action="fee_schedule.make_default",
            object_type="orders.feeschedule",
            object_id=schedule.id,
            before={"default": previous.name if previous else None},
            after={"default": schedule.name},
        )
        self.message_user(request, f"{schedule.name} is now the default fee schedule.", messages.SUCCESS)


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
