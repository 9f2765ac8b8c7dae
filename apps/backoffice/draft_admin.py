"""The screens every maker-checker change drafted on its own page shares: its page, with approve and reject for an
operator who may decide, and the decision's URL (``<id>/decide/``)."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.shortcuts import get_object_or_404, redirect
from django.urls import path
from django.views.decorators.http import require_POST

from apps.core.errors import DomainError
from apps.ledger.admin import ReadOnlyAdmin

from .admin_helpers import about, numeric_id
from .models import ChangeStatus, MakerCheckerDraft


class DraftDecisionAdmin(ReadOnlyAdmin):
    """A change's page shows ``can_decide`` (and the change as ``context_name``) to its template: an operator with
    ``approve_permission``, a second factor confirmed this session, and not its author. ``decide_view`` (POST,
    ``decision`` approve or reject with a ``note``) calls :meth:`approve` or :meth:`reject`, the services, and says
    what happened; their refusals are messages, never errors. Subclasses name the permission, the context name, the
    related rows the page shows (``page_related``) and the two services."""

    approve_permission: str
    context_name: str
    page_related: tuple[str, ...] = ()

    def approve(self, *, change_id: int, approver_id: int) -> MakerCheckerDraft:
        raise NotImplementedError

    def reject(self, *, change_id: int, approver_id: int, note: str) -> MakerCheckerDraft:
        raise NotImplementedError

    def _page_url_name(self) -> str:
        opts = self.model._meta
        return f"admin:{opts.app_label}_{opts.model_name}_change"

    def get_urls(self):
        opts = self.model._meta
        decide = self.admin_site.admin_view(require_POST(self.decide_view))
        name = f"{opts.app_label}_{opts.model_name}_decide"
        return [path("<int:change_id>/decide/", decide, name=name)] + super().get_urls()

    def change_view(self, request, object_id, form_url="", extra_context=None):
        change = get_object_or_404(
            self.model._default_manager.select_related(*self.page_related), id=numeric_id(object_id)
        )
        can_decide = (
            change.status == ChangeStatus.DRAFT
            and request.user.has_perm(self.approve_permission)
            and request.user.is_verified()
            and request.user.id != change.created_by_id
        )
        extra_context = {**(extra_context or {}), self.context_name: change, "can_decide": can_decide}
        return super().change_view(request, object_id, form_url, extra_context)

    def decide_view(self, request, change_id):
        # The second factor is checked here too, not only by the middleware: this is where the change applies.
        if not request.user.has_perm(self.approve_permission) or not request.user.is_verified():
            raise DjangoPermissionDenied
        noun = str(self.model._meta.verbose_name).capitalize()
        decision = request.POST.get("decision")
        try:
            if decision == "approve":
                change = self.approve(change_id=change_id, approver_id=request.user.id)
            elif decision == "reject":
                change = self.reject(
                    change_id=change_id, approver_id=request.user.id, note=request.POST.get("note", "")
                )
            else:
                raise DomainError("Choose approve or reject.")
        except DomainError as error:
            self.message_user(request, about(f"{noun} #{change_id}", error.message), messages.ERROR)
        else:
            self.message_user(request, f"{noun} #{change.pk} {change.get_status_display().lower()}.")
        return redirect(self._page_url_name(), change_id)
