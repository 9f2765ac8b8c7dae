"""The customer screen: one customer's balances, open orders, deposits, withdrawals, log-ins and second
factor, with the operators' actions (freeze trading, block withdrawals, reset the second factor)."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.shortcuts import get_object_or_404, redirect
from django.urls import path
from django.views.decorators.http import require_POST

from apps.accounts.models import AccountRestriction
from apps.accounts.restrictions import CHANGE_PERMISSION, account_trading_freeze, account_withdrawals_block
from apps.accounts.selectors import account_restriction, withdrawal_hold
from apps.core.errors import DomainError
from apps.core.single_valued import DUPLICATE_MESSAGE, SingleValuedForm
from apps.ledger.admin import ReadOnlyAdmin
from apps.ledger.selectors import balances_for_user
from apps.orders.selectors import orders_for_user
from apps.wallets.selectors import deposits_for_user, withdrawals_for_user

from .admin_helpers import numeric_id
from .models import Customer, SecondFactorReset, WithdrawalsUnblock
from .selectors import (
    logins_for_user,
    pending_second_factor_reset,
    pending_withdrawals_unblock,
    second_factor_devices,
    second_factor_resets_for_user,
)
from .services import (
    second_factor_reset_approve,
    second_factor_reset_reject,
    second_factor_reset_request,
    withdrawals_unblock_approve,
    withdrawals_unblock_reject,
    withdrawals_unblock_request,
)

RESET_APPROVE_PERMISSION = "backoffice.approve_secondfactorreset"
RESET_REQUEST_PERMISSION = "backoffice.add_secondfactorreset"
UNBLOCK_APPROVE_PERMISSION = "backoffice.approve_withdrawalsunblock"


def _restriction_of(customer) -> AccountRestriction:
    """The customer's restrictions (loaded with the list), an empty one when never restricted."""
    try:
        return customer.restriction
    except AccountRestriction.DoesNotExist:
        return AccountRestriction()


class RestrictionForm(SingleValuedForm, forms.Form):
    """What :meth:`CustomerAdmin.restrict_view` is posted: each field once (break-it review: the last of two was
    taken)."""

    restriction = forms.ChoiceField(choices=[("trading", "trading"), ("withdrawals", "withdrawals")])
    switch = forms.ChoiceField(choices=[("on", "on"), ("off", "off")])
    reason = forms.Field(required=False)  # as sent: reason_checked says what is wrong with it


@admin.register(Customer)
class CustomerAdmin(ReadOnlyAdmin):
    """Customers (users who are not staff), searchable by username, e-mail or id."""

    list_display = ("id", "username", "email", "date_joined", "last_login", "is_active", "frozen", "blocked")
    list_select_related = ("restriction",)
    search_fields = ("=id", "username", "email")
    list_filter = ("is_active", "restriction__trading_frozen", "restriction__withdrawals_blocked")

    @admin.display(description="trading frozen", boolean=True)
    def frozen(self, customer):
        return _restriction_of(customer).trading_frozen

    @admin.display(description="withdrawals blocked", boolean=True)
    def blocked(self, customer):
        return _restriction_of(customer).withdrawals_blocked

    change_form_template = "admin/backoffice/customer/change_form.html"

    def get_queryset(self, request):
        return super().get_queryset(request).filter(is_staff=False)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path(
                "<int:user_id>/restrict/", wrap(require_POST(self.restrict_view)), name="backoffice_customer_restrict"
            ),
            path(
                "<int:user_id>/second-factor-reset/",
                wrap(require_POST(self.reset_request_view)),
                name="backoffice_customer_reset_request",
            ),
            path(
                "withdrawals-unblock/<int:unblock_id>/decide/",
                wrap(require_POST(self.unblock_decide_view)),
                name="backoffice_customer_unblock_decide",
            ),
            path(
                "second-factor-reset/<int:reset_id>/decide/",
                wrap(require_POST(self.reset_decide_view)),
                name="backoffice_customer_reset_decide",
            ),
        ] + super().get_urls()

    def change_view(self, request, object_id, form_url="", extra_context=None):
        user_id = numeric_id(object_id)
        if Customer.objects.filter(id=user_id, is_staff=True).exists():
            return redirect("admin:auth_user_change", user_id)  # an operator: the audit log links here too
        customer = get_object_or_404(self.get_queryset(request), id=user_id)
        pending = pending_second_factor_reset(user_id=customer.id)
        unblock = pending_withdrawals_unblock(user_id=customer.id)
        extra_context = {
            **(extra_context or {}),
            "customer": customer,
            "restriction": account_restriction(user_id=customer.id),
            "withdrawal_hold": withdrawal_hold(user_id=customer.id),
            "balances": balances_for_user(customer.id),
            "open_orders": orders_for_user(user_id=customer.id, status="open").select_related(
                "market__base", "market__quote"
            )[:50],
            "deposits": deposits_for_user(user_id=customer.id)[:20],
            "withdrawals": withdrawals_for_user(user_id=customer.id)[:20],
            "logins": logins_for_user(user_id=customer.id),
            "devices": second_factor_devices(user=customer),
            "resets": second_factor_resets_for_user(user_id=customer.id)[:10],
            "pending_reset": pending,
            "can_restrict": request.user.has_perm(CHANGE_PERMISSION),
            "pending_unblock": unblock,
            "can_decide_unblock": unblock is not None
            and request.user.has_perm(UNBLOCK_APPROVE_PERMISSION)
            and request.user.is_verified()
            and request.user.id != unblock.created_by_id,
            "can_request_reset": request.user.has_perm(RESET_REQUEST_PERMISSION) and pending is None,
            "can_decide_reset": pending is not None
            and request.user.has_perm(RESET_APPROVE_PERMISSION)
            and request.user.is_verified()
            and request.user.id != pending.created_by_id,
        }
        return super().change_view(request, object_id, form_url, extra_context)

    def _back(self, request, user_id, error: DomainError | None = None, success: str = ""):
        if error is not None:
            self.message_user(request, error.message, messages.ERROR)
        else:
            self.message_user(request, success)
        return redirect("admin:backoffice_customer_change", user_id)

    def restrict_view(self, request, user_id):
        """POST ``restriction`` (trading / withdrawals), ``switch`` (on / off) and a ``reason``."""
        if not request.user.has_perm(CHANGE_PERMISSION):
            raise DjangoPermissionDenied
        get_object_or_404(self.get_queryset(request), id=user_id)  # customers only: never an operator
        form = RestrictionForm(request.POST)
        if not form.is_valid():
            twice = any(
                error.code == "duplicate_field" for errors in form.errors.as_data().values() for error in errors
            )
            message = DUPLICATE_MESSAGE if twice else "Choose a restriction and whether to set or lift it."
            return self._back(request, user_id, DomainError(message))
        restriction, switch, reason = (
            form.cleaned_data["restriction"],
            form.cleaned_data["switch"],
            form.cleaned_data["reason"] or "",
        )
        try:
            if restriction == "trading" and switch in ("on", "off"):
                account_trading_freeze(
                    user_id=user_id, operator_id=request.user.id, frozen=switch == "on", reason=reason
                )
            elif restriction == "withdrawals" and switch == "on":
                account_withdrawals_block(user_id=user_id, operator_id=request.user.id, blocked=True, reason=reason)
            elif restriction == "withdrawals" and switch == "off":  # two operators: a request, another approves
                withdrawals_unblock_request(user_id=user_id, operator_id=request.user.id, reason=reason)
                return self._back(request, user_id, success="Lifting requested; another operator must approve it.")
        except DomainError as error:
            return self._back(request, user_id, error)
        noun = "Trading" if restriction == "trading" else "Withdrawals"
        return self._back(request, user_id, success=f"{noun} {'restricted' if switch == 'on' else 'allowed again'}.")

    def reset_request_view(self, request, user_id):
        """POST a ``reason``: ask for the removal of the customer's second factor."""
        if not request.user.has_perm(RESET_REQUEST_PERMISSION):
            raise DjangoPermissionDenied
        get_object_or_404(self.get_queryset(request), id=user_id)  # customers only: never an operator
        try:
            second_factor_reset_request(
                user_id=user_id, operator_id=request.user.id, reason=request.POST.get("reason", "")
            )
        except DomainError as error:
            return self._back(request, user_id, error)
        return self._back(request, user_id, success="Second-factor reset requested; another operator must approve it.")

    def reset_decide_view(self, request, reset_id):
        """POST ``decision`` (approve / reject, with a ``note``) on a requested reset."""
        self._approver_required(request, RESET_APPROVE_PERMISSION)
        return self._decide(
            request,
            get_object_or_404(SecondFactorReset, id=reset_id),
            approve=lambda: second_factor_reset_approve(reset_id=reset_id, approver_id=request.user.id),
            reject=lambda note: second_factor_reset_reject(reset_id=reset_id, approver_id=request.user.id, note=note),
            noun="Second-factor reset",
        )

    def unblock_decide_view(self, request, unblock_id):
        """POST ``decision`` (approve / reject, with a ``note``) on a request to lift a withdrawals block."""
        self._approver_required(request, UNBLOCK_APPROVE_PERMISSION)
        return self._decide(
            request,
            get_object_or_404(WithdrawalsUnblock, id=unblock_id),
            approve=lambda: withdrawals_unblock_approve(unblock_id=unblock_id, approver_id=request.user.id),
            reject=lambda note: withdrawals_unblock_reject(
                unblock_id=unblock_id, approver_id=request.user.id, note=note
            ),
            noun="Lifting the withdrawals block",
        )

    @staticmethod
    def _approver_required(request, permission: str) -> None:
        """A 403 unless the operator has ``permission`` in a session confirmed by the second factor."""
        if not request.user.has_perm(permission) or not request.user.is_verified():
            raise DjangoPermissionDenied

    def _decide(self, request, draft, *, approve, reject, noun: str):
        """Approve or reject (with the POSTed ``note``) the maker-checker request ``draft`` of a customer, as
        ``decision`` says; back to the customer screen with the outcome."""
        decision = request.POST.get("decision")
        try:
            if decision == "approve":
                approve()
            elif decision == "reject":
                reject(request.POST.get("note", ""))
            else:
                raise DomainError("Choose approve or reject.")
        except DomainError as error:
            return self._back(request, draft.user_id, error)
        done = "approved" if decision == "approve" else "rejected"
        return self._back(request, draft.user_id, success=f"{noun} #{draft.id} {done}.")
