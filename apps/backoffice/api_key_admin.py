"""Customers' API keys in the back office: listed (never their hash or sealed secret), searched, filtered, and
revoked by operators with ``accounts.revoke_apikey`` (each revocation audited, the customer e-mailed)."""

from django.contrib import admin, messages

from apps.accounts.models import ApiKey, Scope
from apps.accounts.services import REVOKE_PERMISSION, api_key_revoke_by_operator
from apps.core.errors import DomainError
from apps.ledger.admin import ReadOnlyAdmin

from .admin_helpers import about


class ScopeFilter(admin.SimpleListFilter):
    """Keys that have the chosen scope (among others)."""

    title = "scope"
    parameter_name = "scope"

    def lookups(self, request, model_admin):
        return Scope.choices

    def queryset(self, request, queryset):
        return queryset.filter(scopes__contains=[self.value()]) if self.value() in Scope.values else queryset


class ActiveFilter(admin.SimpleListFilter):
    """Active keys (neither revoked nor expired), or the others."""

    title = "active"
    parameter_name = "active"

    def lookups(self, request, model_admin):
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.active()
        if self.value() == "no":
            return queryset.exclude(pk__in=ApiKey.objects.active().values("pk"))
        return queryset


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    """Every user's API keys, newest first; the action revokes the selected ones."""

    list_display = (
        "user",
        "name",
        "key_prefix",
        "scopes_display",
        "allowed_ips_display",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )
    # The detail page: what the list shows and the withdrawal allow-list, never secret_hash nor the sealed secret.
    fields = (
        "user",
        "name",
        "prefix",
        "scopes",
        "allowed_ips",
        "withdrawal_addresses",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )
    list_select_related = ("user",)
    search_fields = ("user__username", "=prefix")
    list_filter = (ScopeFilter, ActiveFilter)
    actions = ("revoke_selected",)

    SECRET_FIELDS = ("secret_hash", "signing_secret_sealed")

    def lookup_allowed(self, lookup, value, request=None):
        """Django's rule, but no filter of the list by the key's hash or sealed secret: the admin lets a query
        string filter by any field of the model (``?secret_hash__startswith=0``), and counting the rows each prefix
        leaves would read them out a character at a time (break-it review). Refused lookups are a 400."""
        if lookup.split("__", 1)[0] in self.SECRET_FIELDS:
            return False
        return super().lookup_allowed(lookup, value, request)

    @admin.display(description="key", ordering="prefix")
    def key_prefix(self, key):
        return f"ex_{key.prefix}_…"

    @admin.display(description="scopes")
    def scopes_display(self, key):
        return ", ".join(key.scopes)

    @admin.display(description="allowed IPs")
    def allowed_ips_display(self, key):
        return ", ".join(key.allowed_ips) or "any"

    def has_revoke_permission(self, request) -> bool:
        return request.user.has_perm(REVOKE_PERMISSION)

    @admin.action(description="Revoke selected keys", permissions=["revoke"])
    def revoke_selected(self, request, queryset):
        """Revoke each selected key (:func:`~apps.accounts.services.api_key_revoke_by_operator`: audited with the
        operator as actor, the customer e-mailed); report what was revoked and what was revoked already."""
        revoked, already = [], []
        for key in queryset.order_by("id"):
            try:
                done = api_key_revoke_by_operator(key_id=key.id, operator_id=request.user.id)
            except DomainError as error:
                self.message_user(request, about(f"Key {key}", error.message), messages.ERROR)
                continue
            (revoked if done else already).append(str(key))
        if revoked:
            self.message_user(request, f"Revoked: {', '.join(revoked)}.")
        if already:
            self.message_user(request, f"Revoked already: {', '.join(already)}.", messages.WARNING)
