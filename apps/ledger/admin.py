"""Back-office screens of the ledger: assets, accounts with balances, journal entries and postings read-only,
and the accountants' CSV export of entries and postings by date range.

Nothing here writes a journal row or a balance: entries are posted by services only,
and no money model can be deleted from the admin. Amounts are shown at the asset's display
precision with its code (the exact amount in the tooltip); postings also in Debit and Credit columns.
"""

from collections.abc import Callable
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.shortcuts import render
from django.urls import path, reverse
from django.utils.html import format_html

from apps.core.csv_export import csv_response, text_cell
from apps.core.days import last_day_validator
from apps.core.errors import DomainError
from apps.core.reasons import MAX_REASON_LENGTH, reason_checked
from apps.core.single_valued import SingleValuedForm

from .amounts import format_amount, format_display, format_exact
from .events import asset_saved
from .models import Account, Asset, JournalBlock, JournalEntry, Posting, SigningKey
from .selectors import postings_between

EXPORT_HEADER = [
    "entry_id",
    "time",
    "reason",
    "reference_type",
    "reference_id",
    "idempotency_key",
    "posting_id",
    "account_id",
    "account_kind",
    "owner",
    "asset",
    "debit",
    "credit",
    "amount",
    "balance_after",
]


class ReadOnlyAdmin(admin.ModelAdmin):
    """A model admin that can list and show, never add, change or delete."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def amount_html(value, asset: Asset, *, exact: bool = False):
    """``value`` of ``asset`` at its display precision (``exact``: its full precision, for prices and a market's
    filters, which must never look rounded) with its code; the exact amount as the tooltip."""
    if value is None:
        return ""
    return format_html(
        '<span class="amount" title="{} {}">{} {}</span>',
        format_exact(value),
        asset.code,
        format_display(value, asset.decimals if exact else asset.display_places),
        asset.code,
    )


def amount_column(field: str, asset_of: Callable[[Any], Asset], description: str | None = None, *, exact: bool = False):
    """A list column showing the amount ``field`` of each row with its asset (:func:`amount_html`, ``exact`` as
    there); ``asset_of(row)`` is that asset (select it with the rows: ``list_select_related``)."""

    @admin.display(description=description or field.replace("_", " "), ordering=field)
    def column(model_admin, row):
        return amount_html(getattr(row, field), asset_of(row), exact=exact)

    return column


def asset_state(asset: Asset) -> dict:
    """Every stored field of ``asset`` but its id, JSON-able (amounts as plain decimals without trailing zeros)."""
    state = {}
    for field in Asset._meta.concrete_fields:
        if not field.primary_key:
            value = getattr(asset, field.attname)
            state[field.name] = f"{value.normalize():f}" if isinstance(value, Decimal) else value
    return state


class AssetForm(SingleValuedForm, forms.ModelForm):
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
    """Assets: creating one, or changing its settings, asks a reason and is announced (:data:`asset_saved`) for the
    audit log, in the admin's transaction. The settings decide what leaves the exchange without a second look (the
    auto-approval and daily limits, the minimum and the fee) and when a deposit counts (its confirmations); break-it
    review: a superuser changed them with no reason and no audit row, and a deposit reported with 0 confirmations
    was credited at once."""

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
        """Save the asset and announce it (:data:`asset_saved`: the settings before, read under the row lock, and
        after, with the reason) in the admin's transaction."""
        before = asset_state(Asset.objects.select_for_update().get(pk=obj.pk)) if change else {}
        super().save_model(request, obj, form, change)
        asset_saved.send(
            sender=Asset,
            actor_id=request.user.id,
            asset_id=obj.pk,
            created=not change,
            before=before,
            after=asset_state(obj),
            reason=form.cleaned_data["reason"],
        )


@admin.register(Account)
class AccountAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "owner_name", "asset", "shard", "balance_display", "version", "statement_link")
    list_filter = ("kind", "asset")
    search_fields = ("owner__username", "=id")
    list_select_related = ("owner", "asset")

    @admin.display(description="owner", ordering="owner__username")
    def owner_name(self, account):
        return account.owner.get_username() if account.owner_id else "system"

    @admin.display(description="balance", ordering="balance")
    def balance_display(self, account):
        return amount_html(account.balance, account.asset)

    @admin.display(description="statement")
    def statement_link(self, account):
        url = reverse("admin:ledger_posting_changelist") + f"?account__id__exact={account.id}"
        return format_html('<a href="{}">postings</a>', url)


class PostingInline(admin.TabularInline):
    model = Posting
    fields = ("account", "asset", "debit", "credit", "balance_after_display")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("account__owner", "account__asset", "asset")

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="debit")
    def debit(self, posting):
        return amount_html(posting.amount, posting.asset) if posting.amount > 0 else ""

    @admin.display(description="credit")
    def credit(self, posting):
        return amount_html(-posting.amount, posting.asset) if posting.amount < 0 else ""

    @admin.display(description="balance after")
    def balance_after_display(self, posting):
        return amount_html(posting.balance_after, posting.asset)


class ExportForm(SingleValuedForm, forms.Form):
    """The accountants' export: entries posted from ``start`` to ``end`` (days, UTC, both included; ``end`` at most
    :data:`~apps.core.days.LAST_DAY`, 9999-12-30)."""

    start = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}), validators=[last_day_validator])

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("start") and cleaned.get("end") and cleaned["end"] < cleaned["start"]:
            self.add_error("end", "Must be on or after the start date.")
        return cleaned

    def bounds(self) -> tuple[datetime, datetime]:
        """``(start, end)`` as aware UTC datetimes, ``end`` exclusive."""
        data = self.cleaned_data
        return (
            datetime.combine(data["start"], time.min, tzinfo=UTC),
            datetime.combine(data["end"] + timedelta(days=1), time.min, tzinfo=UTC),
        )


def export_rows(postings):
    """One CSV row per posting with its entry; amounts exact at the asset's precision, debit and credit unsigned."""
    for p in postings:
        decimals = p.asset.decimals
        entry = p.entry
        yield [
            entry.id,
            entry.created_at.isoformat(),
            entry.reason,
            entry.reference_type,
            entry.reference_id,
            entry.idempotency_key,
            p.id,
            p.account_id,
            p.account.kind,
            text_cell(p.account.owner.get_username()) if p.account.owner_id else "",  # chosen at sign-up
            p.asset.code,
            format_amount(p.amount, decimals) if p.amount > 0 else "",
            format_amount(-p.amount, decimals) if p.amount < 0 else "",
            format_amount(p.amount, decimals),
            format_amount(p.balance_after, decimals),
        ]


@admin.register(JournalEntry)
class JournalEntryAdmin(ReadOnlyAdmin):
    list_display = ("id", "created_at", "reason", "reference_type", "reference_id", "idempotency_key", "created_by")
    list_filter = ("reason", "reference_type")
    search_fields = ("=id", "idempotency_key", "reference_id")
    date_hierarchy = "created_at"
    inlines = [PostingInline]
    change_list_template = "admin/ledger/journalentry/change_list.html"

    def get_urls(self):
        export = self.admin_site.admin_view(self.export_view)
        return [path("export/", export, name="ledger_journalentry_export")] + super().get_urls()

    def export_view(self, request):
        """GET with ``start`` and ``end``: every posting of the entries posted in those days, as CSV; without
        them (or invalid), the form."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        form = ExportForm(request.GET or None)
        if form.is_valid():
            start, end = form.bounds()
            name = f"journal-{form.cleaned_data['start']}-{form.cleaned_data['end']}.csv"
            return csv_response(name, EXPORT_HEADER, export_rows(postings_between(start=start, end=end)))
        context = {
            **self.admin_site.each_context(request),
            "title": "Export journal entries and postings (CSV)",
            "opts": self.model._meta,
            "form": form,
        }
        return render(request, "admin/ledger/journalentry/export.html", context, status=400 if form.is_bound else 200)


@admin.register(Posting)
class PostingAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "entry_link",
        "created_at",
        "account",
        "debit",
        "credit",
        "amount_display",
        "balance_after_display",
        "reason",
    )
    list_filter = ("asset", "account__kind")
    search_fields = ("=entry__id", "entry__idempotency_key", "entry__reference_id", "account__owner__username")
    list_select_related = ("entry", "account__asset", "account__owner", "asset")
    change_list_template = "admin/ledger/posting/change_list.html"

    @admin.display(description="entry")
    def entry_link(self, posting):
        url = reverse("admin:ledger_journalentry_change", args=[posting.entry_id])
        return format_html('<a href="{}">#{}</a>', url, posting.entry_id)

    @admin.display(description="time")
    def created_at(self, posting):
        return posting.entry.created_at

    @admin.display(description="debit")
    def debit(self, posting):
        return amount_html(posting.amount, posting.asset) if posting.amount > 0 else ""

    @admin.display(description="credit")
    def credit(self, posting):
        return amount_html(-posting.amount, posting.asset) if posting.amount < 0 else ""

    @admin.display(description="signed amount", ordering="amount")
    def amount_display(self, posting):
        return amount_html(posting.amount, posting.asset)

    @admin.display(description="balance after", ordering="balance_after")
    def balance_after_display(self, posting):
        return amount_html(posting.balance_after, posting.asset)

    @admin.display(description="reason")
    def reason(self, posting):
        return posting.entry.get_reason_display()


@admin.register(JournalBlock)
class JournalBlockAdmin(ReadOnlyAdmin):
    """The sealed journal's blocks (PROOFS.md section 1); ``manage.py journal_verify`` checks them."""

    list_display = ("height", "sealed_at", "entry_count", "block_hash", "key")
    fields = ("height", "previous_hash", "entries_root", "entry_count", "sealed_at", "block_hash", "signature", "key")
    search_fields = ("=height", "block_hash")


@admin.register(SigningKey)
class SigningKeyAdmin(ReadOnlyAdmin):
    """Every public key that has signed blocks or snapshots (served at ``/api/v1/proofs/keys/``)."""

    list_display = ("key_id", "public_key", "created_at")
