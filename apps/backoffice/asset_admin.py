"""Assets in the operators' admin: creating one, or changing its settings, is audited with a reason.

An asset's settings decide what leaves the exchange without a second look (the auto-approval limit, the daily
limit, the minimum and the fee) and when a deposit counts (the confirmations it needs). Break-it review: a superuser
changed them with no reason and no audit row, and a deposit reported with 0 confirmations was credited at once.
Each save writes an ``asset.create`` or ``asset.change`` audit row, the settings before and after and the reason,
in the admin's transaction.
"""

from decimal import Decimal

from django import forms
from django.contrib import admin

from apps.audit.services import audit_record
from apps.core.errors import DomainError
from apps.core.reasons import MAX_REASON_LENGTH, reason_checked
from apps.ledger.admin import amount_column
from apps.ledger.models import Asset


def asset_state(asset: Asset) -> dict:
    """Every stored field of ``asset`` but its id, JSON-able (amounts as plain decimals without trailing zeros)."""
    state = {}
    for field in Asset._meta.concrete_fields:
        if not field.primary_key:
            value = getattr(asset, field.attname)
            state[field.name] = f"{value.normalize():f}" if isinstance(value, Decimal) else value
    return state


class AssetForm(forms.ModelForm):
    """The asset's fields and why it is created or changed (``reason``, required: it goes to the audit log)."""

    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        max_length=MAX_REASON_LENGTH,
        help_text="Why: kept in the audit log with the settings before and after.",
    )

    class Meta:
        model = Asset
        fields = (
            "code",
            "name",
            "decimals",
            "display_decimals",
            "network",
            "confirmations_required",
            "withdrawal_fee",
            "min_withdrawal",
            "withdrawal_auto_approve_limit",
            "withdrawal_daily_limit",
        )

    def clean_reason(self) -> str:
        try:
            return reason_checked(self.cleaned_data.get("reason"))
        except DomainError as refused:
            raise forms.ValidationError(refused.message) from refused


@admin.register(Asset)
class AssetAdmin(admin.ModelAdmin):
    form = AssetForm
    list_display = (
        "code",
        "name",
        "decimals",
        "display_decimals",
        "network",
        "fee_display",
        "minimum_display",
        "auto_approve_display",
        "daily_limit_display",
        "confirmations_required",
    )
    search_fields = ("code", "name")

    fee_display = amount_column("withdrawal_fee", lambda asset: asset, "withdrawal fee")
    minimum_display = amount_column("min_withdrawal", lambda asset: asset, "minimum withdrawal")
    auto_approve_display = amount_column(
        "withdrawal_auto_approve_limit", lambda asset: asset, "approved without an operator up to, per 24 h"
    )
    daily_limit_display = amount_column("withdrawal_daily_limit", lambda asset: asset, "daily limit")

    def get_readonly_fields(self, request, obj=None):
        # Precision and code are fixed once amounts exist in them.
        return ("code", "decimals") if obj else ()

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        """Save the asset and audit it (``asset.create`` / ``asset.change``: the settings before, locked, and after,
        with the reason) in the admin's transaction."""
        before = asset_state(Asset.objects.select_for_update().get(pk=obj.pk)) if change else {}
        super().save_model(request, obj, form, change)
        audit_record(
            actor_id=request.user.id,
            action="asset.change" if change else "asset.create",
            object_type="ledger.asset",
            object_id=obj.pk,
            before=before,
            after={**asset_state(obj), "reason": form.cleaned_data["reason"]},
        )
