"""Fee schedule changes under maker-checker: one operator drafts, another (an approver with a
confirmed second factor this session) approves or rejects; approval applies the change."""

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.shortcuts import redirect, render

from apps.core.errors import DomainError
from apps.core.single_valued import SingleValuedForm
from apps.orders.models import FeeSchedule

from .admin_helpers import add_domain_error
from .draft_admin import DraftDecisionAdmin
from .models import FeeChange, FeeChangeKind
from .services import fee_change_approve, fee_change_draft, fee_change_reject


class FeeChangeForm(SingleValuedForm, forms.Form):
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
class FeeChangeAdmin(DraftDecisionAdmin):
    approve_permission = "backoffice.approve_feechange"
    context_name = "fee_change"
    page_related = ("schedule", "user")
    list_display = ("id", "created_at", "kind", "schedule", "name", "maker_rate", "taker_rate", "user", "status")
    list_filter = ("status", "kind")
    list_select_related = ("schedule", "user")
    change_form_template = "admin/backoffice/feechange/change_form.html"

    def has_add_permission(self, request, obj=None):
        return request.user.has_perm("backoffice.add_feechange")

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

    def approve(self, *, change_id: int, approver_id: int) -> FeeChange:
        return fee_change_approve(change_id=change_id, approver_id=approver_id)

    def reject(self, *, change_id: int, approver_id: int, note: str) -> FeeChange:
        return fee_change_reject(change_id=change_id, approver_id=approver_id, note=note)
