"""Back-office screens: reconciliation (history, run now, per-asset figures), maker-checker adjustments, audit log."""

import json
from decimal import Decimal, InvalidOperation

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.forms import formset_factory
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, path, reverse
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from apps.accounts.selectors import account_restriction, withdrawal_hold
from apps.audit.models import AuditLogEntry
from apps.core.errors import DomainError
from apps.core.reasons import hidden_characters_shown
from apps.core.single_valued import SingleValuedForm, SingleValuedFormSet
from apps.ledger.admin import ReadOnlyAdmin, amount_column
from apps.ledger.amounts import format_exact, parse_amount
from apps.ledger.models import Account, AccountKind, Asset
from apps.ledger.selectors import balances_for_user, user_postings
from apps.ledger.services import Leg, system_account, user_account
from apps.wallets.selectors import (
    deposits_for_user,
    withdrawals_for_user,
    withdrawals_to_decide,
)

from . import api_key_admin, customer_admin, fee_admin, market_admin, user_admin  # noqa: F401 (their screens register on import)
from .admin_helpers import about, numeric_id
from .models import (
    Adjustment,
    AdjustmentStatus,
    ReconciliationRun,
    WithdrawalApproval,
)
from .selectors import withdrawal_risk_signals
from .services import (
    adjustment_approve,
    adjustment_draft,
    adjustment_reject,
    adjustment_withdraw,
    audit_record,
    reconciliation_run,
    withdrawal_decide,
)

# The lists need the page's width at 1440 px (a filter panel already takes a column); the index (the
# dashboard with every model's list) and the breadcrumbs lead everywhere the sidebar did.
admin.site.enable_nav_sidebar = False


@admin.register(ReconciliationRun)
class ReconciliationRunAdmin(ReadOnlyAdmin):
    list_display = ("started_at", "result", "failed", "triggered_by")
    list_filter = ("ok",)
    change_list_template = "admin/backoffice/reconciliationrun/change_list.html"
    change_form_template = "admin/backoffice/reconciliationrun/change_form.html"

    @admin.display(description="result", boolean=True, ordering="ok")
    def result(self, run):
        return run.ok

    @admin.display(description="failed checks")
    def failed(self, run):
        return ", ".join(f"{c['invariant']}: {c['name']}" for c in run.failed_checks) or "—"

    def get_urls(self):
        run_now = self.admin_site.admin_view(require_POST(self.run_now_view))
        return [path("run/", run_now, name="backoffice_reconciliationrun_run")] + super().get_urls()

    def run_now_view(self, request):
        if not request.user.has_perm("backoffice.run_reconciliation"):
            raise DjangoPermissionDenied
        run = reconciliation_run(triggered_by_id=request.user.id)
        audit_record(
            actor_id=request.user.id,
            action="reconciliation.run",
            object_type="backoffice.reconciliationrun",
            object_id=run.id,
            before={},
            after={"ok": run.ok},
        )
        level = messages.SUCCESS if run.ok else messages.ERROR
        self.message_user(request, f"Reconciliation {'passed' if run.ok else 'FAILED'}.", level)
        return redirect("admin:backoffice_reconciliationrun_change", run.id)

    def changelist_view(self, request, extra_context=None):
        latest = ReconciliationRun.objects.first()
        extra_context = {
            **(extra_context or {}),
            "latest": latest,
            "can_run": request.user.has_perm("backoffice.run_reconciliation"),
        }
        return super().changelist_view(request, extra_context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        get_object_or_404(ReconciliationRun, id=numeric_id(object_id))
        return super().change_view(request, object_id, form_url, extra_context)


class AdjustmentForm(SingleValuedForm, forms.Form):
    memo = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 60}), help_text="Why: ticket, incident, ...")


ADJUSTABLE_KINDS = [(kind.value, kind.label) for kind in AccountKind if kind != AccountKind.USER_HELD]


class AdjustmentLegForm(SingleValuedForm, forms.Form):
    """One leg: which account (a kind of the chart, an asset, and a username for user funds), a side, an amount.

    An untouched row is skipped. Held funds cannot be adjusted (they belong to open orders
    and pending withdrawals). The account is found, or opened, when the draft is saved.
    """

    kind = forms.ChoiceField(choices=[("", "—"), *ADJUSTABLE_KINDS], required=False, label="account")
    asset = forms.ModelChoiceField(queryset=Asset.objects.order_by("code"), required=False)
    username = forms.CharField(max_length=150, required=False, help_text="for user available funds")
    side = forms.ChoiceField(choices=[("", "—"), ("debit", "Debit"), ("credit", "Credit")], required=False)
    amount = forms.CharField(max_length=50, required=False)

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        for name in ("kind", "asset", "side", "amount"):
            if not cleaned.get(name):
                self.add_error(name, "This field is required.")
        kind, username = cleaned.get("kind"), cleaned.get("username", "").strip()
        if kind == AccountKind.USER_AVAILABLE:
            cleaned["user"] = get_user_model().objects.filter(username=username).first()
            if cleaned["user"] is None:
                self.add_error("username", "No such user." if username else "Name the user.")
        elif username:
            self.add_error("username", "Only user available funds belong to a user.")
        if cleaned.get("asset") and cleaned.get("amount"):
            try:
                cleaned["value"] = parse_amount(cleaned["amount"], decimals=cleaned["asset"].decimals)
            except DomainError as error:
                self.add_error("amount", error.message)
        return cleaned

    def leg(self) -> Leg:
        """The signed leg on the named account (opened if it has none yet); call after validation."""
        data = self.cleaned_data
        if data["kind"] == AccountKind.USER_AVAILABLE:
            account = user_account(data["user"].id, data["asset"])
        else:
            account = system_account(data["kind"], data["asset"], shard_key="adjustment")
        return Leg(account.id, data["value"] if data["side"] == "debit" else -data["value"])


AdjustmentLegFormSet = formset_factory(
    AdjustmentLegForm, formset=SingleValuedFormSet, extra=4, min_num=2, validate_min=True
)


@admin.register(Adjustment)
class AdjustmentAdmin(ReadOnlyAdmin):
    list_display = ("id", "created_at", "status", "created_by", "decided_by", "memo_short", "entry")
    list_filter = ("status",)
    change_form_template = "admin/backoffice/adjustment/change_form.html"

    @admin.display(description="memo")
    def memo_short(self, adjustment):
        return adjustment.memo[:60]

    def has_add_permission(self, request, obj=None):
        return request.user.has_perm("backoffice.add_adjustment")

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path(
                "<int:adjustment_id>/approve/",
                wrap(require_POST(self.approve_view)),
                name="backoffice_adjustment_approve",
            ),
            path(
                "<int:adjustment_id>/reject/", wrap(require_POST(self.reject_view)), name="backoffice_adjustment_reject"
            ),
            path(
                "<int:adjustment_id>/withdraw/",
                wrap(require_POST(self.withdraw_view)),
                name="backoffice_adjustment_withdraw",
            ),
        ] + super().get_urls()

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise DjangoPermissionDenied
        form = AdjustmentForm(request.POST or None)
        legs = AdjustmentLegFormSet(request.POST or None, prefix="legs")
        if request.method == "POST" and form.is_valid() and legs.is_valid():
            try:
                adjustment = adjustment_draft(
                    author_id=request.user.id,
                    memo=form.cleaned_data["memo"],
                    legs=[leg_form.leg() for leg_form in legs if leg_form.has_changed()],
                )
            except DomainError as error:
                form.add_error(None, error.message)
            else:
                self.message_user(request, f"Adjustment #{adjustment.id} drafted; another operator must approve it.")
                return redirect("admin:backoffice_adjustment_change", adjustment.id)
        context = {
            **self.admin_site.each_context(request),
            "title": "Draft a manual adjustment",
            "form": form,
            "legs": legs,
            "opts": self.model._meta,
        }
        return render(request, "admin/backoffice/adjustment/draft.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        adjustment = get_object_or_404(Adjustment, id=numeric_id(object_id))
        accounts = Account.objects.select_related("asset", "owner").in_bulk([leg["account"] for leg in adjustment.legs])
        legs = []
        for leg in adjustment.legs:
            amount = Decimal(leg["amount"])
            legs.append(
                {
                    "account": accounts.get(leg["account"]),
                    "debit": amount if amount > 0 else None,
                    "credit": -amount if amount < 0 else None,
                }
            )
        can_decide = (
            adjustment.status == AdjustmentStatus.DRAFT
            and request.user.has_perm("backoffice.approve_adjustment")
            and request.user.id != adjustment.created_by_id
        )
        can_withdraw = adjustment.status == AdjustmentStatus.DRAFT and request.user.id == adjustment.created_by_id
        extra_context = {
            **(extra_context or {}),
            "legs": legs,
            "can_decide": can_decide,
            "can_withdraw": can_withdraw,
            "adjustment": adjustment,
        }
        return super().change_view(request, object_id, form_url, extra_context)

    def _decide(self, request, adjustment_id, decide):
        if not request.user.has_perm("backoffice.approve_adjustment"):
            raise DjangoPermissionDenied
        try:
            adjustment = decide()
        except DomainError as error:
            self.message_user(request, error.message, messages.ERROR)
        else:
            self.message_user(request, f"Adjustment #{adjustment.id} {adjustment.get_status_display().lower()}.")
        return redirect("admin:backoffice_adjustment_change", adjustment_id)

    def withdraw_view(self, request, adjustment_id):
        """The author withdraws their own draft (the service checks who asks)."""
        try:
            adjustment = adjustment_withdraw(adjustment_id=adjustment_id, author_id=request.user.id)
        except DomainError as error:
            self.message_user(request, error.message, messages.ERROR)
        else:
            self.message_user(request, f"Adjustment #{adjustment.id} withdrawn; nothing was posted.")
        return redirect("admin:backoffice_adjustment_change", adjustment_id)

    def approve_view(self, request, adjustment_id):
        return self._decide(
            request, adjustment_id, lambda: adjustment_approve(adjustment_id=adjustment_id, approver_id=request.user.id)
        )

    def reject_view(self, request, adjustment_id):
        note = request.POST.get("note", "")
        return self._decide(
            request,
            adjustment_id,
            lambda: adjustment_reject(adjustment_id=adjustment_id, approver_id=request.user.id, note=note),
        )


def _plain(value) -> str:
    """A recorded value as an operator reads it: decimals plainly (``0E-18`` -> ``0``), lists joined, JSON else; hidden
    characters as their escapes (:func:`~apps.core.reasons.hidden_characters_shown`)."""
    if isinstance(value, str):
        try:
            number = Decimal(value)
        except InvalidOperation:
            return hidden_characters_shown(value)
        return format_exact(number) if number.is_finite() else value
    if isinstance(value, list):
        return ", ".join(_plain(item) for item in value) or "—"
    if value is None:
        return "—"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def state_html(state: dict, *, other: dict | None = None):
    """An audit state as ``key: value`` lines (wrapping, so the column fits); keys whose value differs from ``other``
    (the state on the other side of the change) are marked."""
    if not state:
        return "—"
    lines = []
    for key, value in state.items():
        changed = other is not None and other.get(key) != value
        lines.append(
            format_html('<div class="{}"><span>{}:</span> {}</div>', "changed" if changed else "", key, _plain(value))
        )
    return format_html('<div class="audit-state">{}</div>', format_html_join("", "{}", ((line,) for line in lines)))


@admin.register(AuditLogEntry)
class AuditLogEntryAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "actor_name", "action", "object_link", "before_display", "after_display")
    list_filter = ("action", "object_type")
    search_fields = ("=object_id", "actor__username", "action")
    list_select_related = ("actor",)

    @admin.display(description="actor", ordering="actor__username")
    def actor_name(self, entry):
        # Log-ins and failed log-ins are recorded without an actor (the user is the object).
        return "—" if entry.actor is None else entry.actor.get_username()

    @admin.display(description="before")
    def before_display(self, entry):
        return state_html(entry.before)

    @admin.display(description="after")
    def after_display(self, entry):
        return state_html(entry.after, other=entry.before)

    # Object types shown on another page than their own model's admin (users on the customer screen).
    OBJECT_PAGES = {"auth.user": "backoffice_customer"}

    @admin.display(description="object")
    def object_link(self, entry):
        page = self.OBJECT_PAGES.get(entry.object_type, entry.object_type.replace(".", "_"))
        try:
            url = reverse(f"admin:{page}_change", args=[entry.object_id])
        except NoReverseMatch:  # an object type without an admin page is shown as text
            return f"{entry.object_type} {entry.object_id}"
        return format_html('<a href="{}">{} {}</a>', url, entry.object_type, entry.object_id)


@admin.register(WithdrawalApproval)
class WithdrawalApprovalAdmin(ReadOnlyAdmin):
    """The approval queue, oldest first: each withdrawal with the user's balances and recent activity; with them
    the approved withdrawals a block on the account's withdrawals holds back, which can only be rejected."""

    list_display = ("id", "created_at", "user", "asset", "amount_display", "fee_display", "address", "status")
    list_select_related = ("user", "asset")
    # At the asset's ledger precision, trailing zeros trimmed: the amount decided on, never cut (nor 18 places).
    amount_display = amount_column("amount", lambda withdrawal: withdrawal.asset, "amount", exact=True)
    fee_display = amount_column("fee", lambda withdrawal: withdrawal.asset, "fee", exact=True)
    search_fields = ("=id", "user__username", "=address")
    change_form_template = "admin/backoffice/withdrawalapproval/change_form.html"
    actions = ["approve_selected"]

    def get_queryset(self, request):
        return withdrawals_to_decide()

    def get_actions(self, request):
        actions = super().get_actions(request)
        if not request.user.has_perm("wallets.approve_withdrawal"):
            actions.pop("approve_selected", None)
        return actions

    @admin.action(description="Approve the selected withdrawals")
    def approve_selected(self, request, queryset):
        """Show each selected withdrawal (customer, amount, the whole address, its risk signals) and approve them
        only once the approver confirms on that page, as Django's own delete asks (break-it review: one click
        approved them all, no signal shown)."""
        if request.POST.get("confirm") != "yes":
            withdrawals = queryset.select_related("user", "asset").order_by("id")
            context = {
                **self.admin_site.each_context(request),
                "title": "Approve these withdrawals?",
                "opts": self.model._meta,
                "rows": [(withdrawal, withdrawal_risk_signals(withdrawal)) for withdrawal in withdrawals],
                "action_checkbox_name": ACTION_CHECKBOX_NAME,
            }
            return render(request, "admin/backoffice/withdrawalapproval/approve_selected.html", context)
        for withdrawal_id in queryset.values_list("id", flat=True):
            self._decide(request, withdrawal_id, approve=True)
        return None

    def get_urls(self):
        decide = self.admin_site.admin_view(require_POST(self.decide_view))
        return [
            path("<int:withdrawal_id>/decide/", decide, name="backoffice_withdrawalapproval_decide")
        ] + super().get_urls()

    def _decide(self, request, withdrawal_id: int, *, approve: bool, reason: str = "") -> bool:
        try:
            withdrawal_decide(withdrawal_id=withdrawal_id, operator_id=request.user.id, approve=approve, reason=reason)
        except DomainError as error:
            self.message_user(request, about(f"Withdrawal #{withdrawal_id}", error.message), messages.ERROR)
            return False
        self.message_user(request, f"Withdrawal #{withdrawal_id} {'approved' if approve else 'rejected'}.")
        return True

    def decide_view(self, request, withdrawal_id):
        if not request.user.has_perm("wallets.approve_withdrawal"):
            raise DjangoPermissionDenied
        decision = request.POST.get("decision")
        if decision not in ("approve", "reject"):
            self.message_user(request, "Choose approve or reject.", messages.ERROR)
        else:
            self._decide(request, withdrawal_id, approve=decision == "approve", reason=request.POST.get("reason", ""))
        return redirect("admin:backoffice_withdrawalapproval_changelist")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        withdrawal = get_object_or_404(
            WithdrawalApproval.objects.select_related("user", "asset"), id=numeric_id(object_id)
        )
        user_id = withdrawal.user_id
        extra_context = {
            **(extra_context or {}),
            "withdrawal": withdrawal,
            "balances": balances_for_user(user_id),
            "recent_withdrawals": withdrawals_for_user(user_id=user_id)[:10],
            "recent_deposits": deposits_for_user(user_id=user_id)[:10],
            "recent_postings": user_postings(user_id)[:20],
            "signals": withdrawal_risk_signals(withdrawal),
            "restriction": account_restriction(user_id=user_id),
            "withdrawal_hold": withdrawal_hold(user_id=user_id),
            "can_decide": request.user.has_perm("wallets.approve_withdrawal") and request.user.id != user_id,
        }
        return super().change_view(request, object_id, form_url, extra_context)
