"""Fee schedule changes under maker-checker: one operator drafts, another (an approver with a
confirmed second factor this session) approves or rejects; approval applies the change."""

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.http import require_POST

from apps.core.errors import DomainError
from apps.ledger.admin import ReadOnlyAdmin
from apps.orders.models import FeeSchedule

from .admin_helpers import about, add_domain_error, numeric_id
from .models import ChangeStatus, FeeChange, FeeChangeKind
from .services import fee_change_approve, fee_change_draft, fee_change_reject

APPROVE_PERMISSION = "backoffice.approve_feechange"


class FeeChangeForm(forms.Form):
    """What to change; which fields count depends on ``kind`` (see :func:`fee_change_draft`)."""

    kind = forms.ChoiceField(choices=FeeChangeKind.choices)
    schedule = forms.ModelChoiceField(
        queryset=FeeSchedule.objects.order_by("name"),
        required=False,
        help_text="The schedule to change, to make the default, or to assign (empty: back to the default).",
    )
    name = forms.CharField(max_length=64, required=False, help_text="The name of a new schedule.")
    maker_rate = forms.CharField(max_length=20, required=False, help_text="A fraction: 0.001 is 0.1 %.")
    taker_rate = forms.CharField(max_length=20, required=False, help_text="A fraction: 0.001 is 0.1 %.")
    username = forms.CharField(max_length=150, required=False, help_text="The user to assign to the schedule.")
    memo = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 60}), help_text="Why: ticket, deal, ...")

    def clean_username(self):
        username = self.cleaned_data["username"].strip()
        if not username:
            return None
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise forms.ValidationError("No such user.")
        return user


# Fields of the service's errors -> fields of the form.
FORM_FIELDS = {"user": "username"}


@admin.register(FeeChange)
class FeeChangeAdmin(ReadOnlyAdmin):
    list_display = ("id", "created_at", "kind", "schedule", "name", "maker_rate", "taker_rate", "user", "status")
    list_filter = ("status", "kind")
    list_select_related = ("schedule", "user")
    change_form_template = "admin/backoffice/feechange/change_form.html"

    def has_add_permission(self, request, obj=None):
        return request.user.has_perm("backoffice.add_feechange")

    def get_urls(self):
        decide = self.admin_site.admin_view(require_POST(self.decide_view))
        return [path("<int:change_id>/decide/", decide, name="backoffice_feechange_decide")] + super().get_urls()

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise DjangoPermissionDenied
        initial = {"schedule": request.GET.get("schedule")} if request.GET.get("schedule", "").isdigit() else {}
        form = FeeChangeForm(request.POST or None, initial=initial)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                change = fee_change_draft(
                    author_id=request.user.id,
                    kind=data["kind"],
                    memo=data["memo"],
                    schedule_id=data["schedule"].id if data["schedule"] else None,
                    name=data["name"],
                    maker_rate=data["maker_rate"] or None,
                    taker_rate=data["taker_rate"] or None,
                    user_id=data["username"].id if data["username"] else None,
                )
            except DomainError as error:
                add_domain_error(form, error, FORM_FIELDS)
            else:
                self.message_user(request, f"Fee change #{change.id} drafted; another operator must approve it.")
                return redirect("admin:backoffice_feechange_change", change.id)
        context = {
            **self.admin_site.each_context(request),
            "title": "Draft a fee schedule change",
            "fee_rate_max": f"{settings.FEE_RATE_MAX.normalize():f}",
            "form": form,
            "opts": self.model._meta,
        }
        return render(request, "admin/backoffice/feechange/draft.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        change = get_object_or_404(FeeChange.objects.select_related("schedule", "user"), id=numeric_id(object_id))
        can_decide = (
            change.status == ChangeStatus.DRAFT
            and request.user.has_perm(APPROVE_PERMISSION)
            and request.user.is_verified()
            and request.user.id != change.created_by_id
        )
        extra_context = {**(extra_context or {}), "fee_change": change, "can_decide": can_decide}
        return super().change_view(request, object_id, form_url, extra_context)

    def decide_view(self, request, change_id):
        # The second factor is checked here too, not only by the middleware: this is where fees change.
        if not request.user.has_perm(APPROVE_PERMISSION) or not request.user.is_verified():
            raise DjangoPermissionDenied
        decision = request.POST.get("decision")
        try:
            if decision == "approve":
                change = fee_change_approve(change_id=change_id, approver_id=request.user.id)
            elif decision == "reject":
                change = fee_change_reject(
                    change_id=change_id, approver_id=request.user.id, note=request.POST.get("note", "")
                )
            else:
                raise DomainError("Choose approve or reject.")
        except DomainError as error:
            self.message_user(request, about(f"Fee change #{change_id}", error.message), messages.ERROR)
        else:
            self.message_user(request, f"Fee change #{change.id} {change.get_status_display().lower()}.")
        return redirect("admin:backoffice_feechange_change", change_id)
