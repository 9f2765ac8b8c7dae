"""Changes of a market's filters under maker-checker: one operator drafts new quantity limits, minimum notional and
price band with a reason; another (an approver with a confirmed second factor this session) approves, which
applies them, or rejects."""

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.shortcuts import redirect, render

from apps.core.errors import DomainError
from apps.core.single_valued import SingleValuedForm
from apps.ledger.admin import amount_column
from apps.ledger.amounts import format_exact
from apps.ledger.forms import PlainAmountFormField
from apps.orders.models import Market

from .admin_helpers import add_domain_error
from .draft_admin import DraftDecisionAdmin
from .models import MarketChange
from .services import market_change_approve, market_change_draft, market_change_reject


def _amount_field(help_text: str, **options) -> PlainAmountFormField:
    return PlainAmountFormField(help_text=help_text, **options)


class MarketChangeForm(SingleValuedForm, forms.Form):
    """The market's new filters, every one of them (the form starts from the market's current ones)."""

    market = forms.ModelChoiceField(queryset=Market.objects.order_by("symbol"))
    min_qty = _amount_field("Minimum order quantity, in the base asset: a multiple of the step size.")
    max_qty = _amount_field("Maximum order quantity, in the base asset: a multiple of the step size.")
    min_notional = _amount_field("Minimum order value, in the quote asset (0: none).", min_value=0)
    market_order_price_band = _amount_field(
        "Market orders' price protection, in %: a market order fills no further than this from the best price it "
        "meets. Empty: no protection.",
        required=False,
    )
    memo = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 60}), help_text="Why: ticket, incident, ...")


@admin.register(MarketChange)
class MarketChangeAdmin(DraftDecisionAdmin):
    approve_permission = "backoffice.approve_marketchange"
    context_name = "market_change"
    page_related = ("market__base", "market__quote")
    list_display = (
        "id",
        "created_at",
        "market",
        "min_qty_display",
        "max_qty_display",
        "min_notional_display",
        "market_order_price_band",
        "status",
    )
    list_filter = ("status", "market")
    list_select_related = page_related
    min_qty_display = amount_column("min_qty", lambda change: change.market.base, "min quantity", exact=True)
    max_qty_display = amount_column("max_qty", lambda change: change.market.base, "max quantity", exact=True)
    min_notional_display = amount_column("min_notional", lambda change: change.market.quote, "min notional", exact=True)
    change_form_template = "admin/backoffice/marketchange/change_form.html"

    def has_add_permission(self, request, obj=None):
        return request.user.has_perm("backoffice.add_marketchange")

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise DjangoPermissionDenied
        form = MarketChangeForm(request.POST or None, initial=self._initial(request))
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                change = market_change_draft(
                    author_id=request.user.id,
                    market_id=data["market"].id,
                    min_qty=data["min_qty"],
                    max_qty=data["max_qty"],
                    min_notional=data["min_notional"],
                    market_order_price_band=data["market_order_price_band"],
                    memo=data["memo"],
                )
            except DomainError as error:
                add_domain_error(form, error)
            else:
                self.message_user(
                    request,
                    f"Change #{change.id} of {change.market}'s filters drafted; another operator must approve it.",
                )
                return redirect("admin:backoffice_marketchange_change", change.id)
        context = {
            **self.admin_site.each_context(request),
            "title": "Draft a change of a market's filters",
            "form": form,
            "opts": self.model._meta,
        }
        return render(request, "admin/backoffice/marketchange/draft.html", context)

    @staticmethod
    def _initial(request) -> dict:
        """The form's starting values: the filters of the market named by ``?market=<id>`` (the market's page links
        here), so the operator changes only what they mean to."""
        market_id = request.GET.get("market", "")
        market = Market.objects.filter(id=market_id).first() if market_id.isdigit() else None
        if market is None:
            return {}
        band = market.market_order_price_band
        return {  # plain decimals: Decimal.normalize() writes 1000 as 1E+3, which the form refuses (break-it review)
            "market": market.id,
            "min_qty": format_exact(market.min_qty),
            "max_qty": format_exact(market.max_qty),
            "min_notional": format_exact(market.min_notional),
            "market_order_price_band": None if band is None else format_exact(band),
        }

    def approve(self, *, change_id: int, approver_id: int) -> MarketChange:
        return market_change_approve(change_id=change_id, approver_id=approver_id)

    def reject(self, *, change_id: int, approver_id: int, note: str) -> MarketChange:
        return market_change_reject(change_id=change_id, approver_id=approver_id, note=note)
