"""Back-office screens of the ledger: assets, accounts with balances, journal entries read-only.

Nothing here writes a journal row or a balance: entries are posted by services only,
and no money model can be deleted from the admin.
"""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from .amounts import format_amount
from .models import Account, Asset, JournalBlock, JournalEntry, Posting, SigningKey


class ReadOnlyAdmin(admin.ModelAdmin):
    """A model admin that can list and show, never add, change or delete."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Asset)
class AssetAdmin(admin.ModelAdmin):
    list_display = (
        "code",
        "name",
        "decimals",
        "network",
        "withdrawal_fee",
        "min_withdrawal",
        "withdrawal_auto_approve_limit",
        "withdrawal_daily_limit",
        "confirmations_required",
    )
    search_fields = ("code", "name")

    def get_readonly_fields(self, request, obj=None):
        # Precision and code are fixed once amounts exist in them.
        return ("code", "decimals") if obj else ()

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Account)
class AccountAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "owner", "asset", "shard", "balance_display", "version", "statement_link")
    list_filter = ("kind", "asset")
    search_fields = ("owner__username", "=id")
    list_select_related = ("owner", "asset")

    @admin.display(description="balance", ordering="balance")
    def balance_display(self, account):
        return format_amount(account.balance, account.asset.decimals)

    @admin.display(description="statement")
    def statement_link(self, account):
        url = reverse("admin:ledger_posting_changelist") + f"?account__id__exact={account.id}"
        return format_html('<a href="{}">postings</a>', url)


class PostingInline(admin.TabularInline):
    model = Posting
    fields = ("account", "asset", "amount", "balance_after")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(JournalEntry)
class JournalEntryAdmin(ReadOnlyAdmin):
    list_display = ("id", "created_at", "reason", "reference_type", "reference_id", "idempotency_key", "created_by")
    list_filter = ("reason", "reference_type")
    search_fields = ("=id", "idempotency_key", "reference_id")
    date_hierarchy = "created_at"
    inlines = [PostingInline]


@admin.register(Posting)
class PostingAdmin(ReadOnlyAdmin):
    list_display = ("id", "entry_link", "created_at", "account", "asset", "amount", "balance_after", "reason")
    list_filter = ("asset", "account__kind")
    search_fields = ("=entry__id", "entry__idempotency_key", "entry__reference_id", "account__owner__username")
    list_select_related = ("entry", "account__asset", "account__owner", "asset")

    @admin.display(description="entry")
    def entry_link(self, posting):
        url = reverse("admin:ledger_journalentry_change", args=[posting.entry_id])
        return format_html('<a href="{}">#{}</a>', url, posting.entry_id)

    @admin.display(description="time")
    def created_at(self, posting):
        return posting.entry.created_at

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
