"""The traders' web UI: thin views over the services and selectors of the other apps."""

import contextlib

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.models import ApiKey
from apps.accounts.second_factor import user_has_second_factor
from apps.accounts.services import api_key_create, api_key_revoke
from apps.ledger.amounts import parse_amount
from apps.ledger.errors import DomainError, IdempotencyConflict
from apps.ledger.models import Asset
from apps.ledger.selectors import balances_for_user, user_postings
from apps.wallets.custody.base import CustodyError
from apps.wallets.models import WithdrawalStatus
from apps.wallets.selectors import (
    deposit_address_for_user,
    deposits_for_user,
    withdrawals_for_user,
)
from apps.wallets.services import (
    deposit_address_get_or_create,
    withdrawal_cancel,
    withdrawal_request,
)

from .forms import ApiKeyForm, SignUpForm, WithdrawForm, add_domain_error, with_new_key

HISTORY_ROWS = 50
ASSET_CODE_MAX_LENGTH = Asset._meta.get_field("code").max_length
# A user may cancel a withdrawal in these states (DESIGN.md section 8).
CANCELLABLE_WITHDRAWALS = (WithdrawalStatus.REQUESTED, WithdrawalStatus.AWAITING_APPROVAL)


def home(request):
    return redirect("web:wallet" if request.user.is_authenticated else "login")


def signup(request):
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, "Welcome! Your account is ready.")
        return redirect("web:wallet")
    return render(request, "registration/signup.html", {"form": form})


def _assets() -> list[Asset]:
    return list(Asset.objects.order_by("code"))


def _asset_named(code: str) -> Asset | None:
    """The asset with this code; ``None`` for an unknown code or text no code can be."""
    if not code or len(code) > 10 or not code.isprintable():
        return None
    return Asset.objects.filter(code=code).first()


def _render_wallet(request, form: WithdrawForm | None = None, status: int = 200):
    assets = _assets()
    form = form or WithdrawForm(assets=assets)
    selected = next((a for a in assets if a.code == form["asset"].value()), assets[0] if assets else None)
    return render(
        request,
        "web/wallet.html",
        {
            "balances": balances_for_user(request.user.id),
            "deposit_rows": [
                (asset, deposit_address_for_user(user_id=request.user.id, asset_id=asset.id)) for asset in assets
            ],
            "form": form,
            "fee": _fee_context(selected, form["amount"].value()),
            "deposits": deposits_for_user(user_id=request.user.id)[:HISTORY_ROWS],
            "withdrawals": withdrawals_for_user(user_id=request.user.id)[:HISTORY_ROWS],
            "cancellable": CANCELLABLE_WITHDRAWALS,
        },
        status=status,
    )


@login_required
def wallet(request):
    """Balances, deposit addresses, the withdraw form and the deposit and withdrawal history; htmx polls
    for the balances table alone."""
    if request.htmx:
        return render(request, "web/_balances.html", {"balances": balances_for_user(request.user.id)})
    return _render_wallet(request)


def _fee_context(asset: Asset | None, raw_amount: str | None) -> dict:
    """The withdrawal fee of ``asset`` and, for a valid ``raw_amount``, what leaves the balance in all."""
    if asset is None:
        return {}
    context: dict[str, object] = {"asset": asset}
    with contextlib.suppress(DomainError):
        context["total"] = parse_amount(raw_amount, decimals=asset.decimals) + asset.withdrawal_fee
    return context


@login_required
@require_GET
def withdraw_fee(request):
    """htmx: the fee line of the withdraw form for the chosen asset and amount."""
    asset = _asset_named(request.GET.get("asset", ""))
    if asset is None:
        raise Http404("No such asset.")
    return render(request, "web/_withdraw_fee.html", {"fee": _fee_context(asset, request.GET.get("amount"))})


@login_required
@require_POST
def withdraw(request):
    """Request a withdrawal from the wallet page's form; refusals are shown next to the field at fault."""
    form = WithdrawForm(request.POST, assets=_assets())
    if form.is_valid():
        data = form.cleaned_data
        try:
            withdrawal = withdrawal_request(
                user_id=request.user.id,
                asset_code=data["asset"],
                amount=data["amount"],
                address=data["address"],
                request_key=data["request_key"],
            )
        except IdempotencyConflict:
            form = with_new_key(
                form,
                "request_key",
                "A withdrawal was already requested from this form with other "
                "values (see your withdrawals). Nothing was requested now; send the form again to "
                "request this one too.",
                assets=_assets(),
            )
        except DomainError as error:
            add_domain_error(form, error)
        else:
            messages.success(
                request,
                f"Withdrawal #{withdrawal.id} of {withdrawal.amount.normalize():f} "
                f"{withdrawal.asset.code}: {withdrawal.get_status_display().lower()}.",
            )
            return redirect("web:wallet")
    return _render_wallet(request, form=form, status=400)


@login_required
@require_POST
def withdrawal_cancel_view(request, withdrawal_id: int):
    """Cancel one of the user's pending withdrawals; its hold is released."""
    try:
        withdrawal = withdrawal_cancel(withdrawal_id=withdrawal_id, user_id=request.user.id)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Withdrawal #{withdrawal.id} cancelled; the funds are available again.")
    return redirect("web:wallet")


@login_required
@require_POST
def deposit_address(request):
    """Show (creating it the first time) the user's deposit address for an asset; htmx gets the address alone."""
    asset = _asset_named(request.POST.get("asset", ""))
    if asset is None:
        raise Http404("No such asset.")
    try:
        address = deposit_address_get_or_create(user_id=request.user.id, asset=asset)
    except CustodyError:
        if request.htmx:
            return render(request, "web/_deposit_address.html", {"asset": asset, "unavailable": True})
        messages.error(request, "The custody provider did not answer; try again shortly.")
        return redirect("web:wallet")
    if request.htmx:
        return render(request, "web/_deposit_address.html", {"asset": asset, "address": address})
    return redirect("web:wallet")


@login_required
def activity(request):
    """The user's postings, newest first; ``?asset=CODE`` keeps one asset's (400 for a code no asset can have)."""
    asset = request.GET.get("asset") or None
    if asset is not None and not (len(asset) <= ASSET_CODE_MAX_LENGTH and asset.isprintable()):
        context = {"postings": [], "asset": None, "error": "Not a valid asset code."}
        return render(request, "web/activity.html", context, status=400)
    postings = user_postings(request.user.id, asset_code=asset)[:200]
    return render(request, "web/activity.html", {"postings": postings, "asset": asset})


@login_required
def api_keys(request):
    """The user's API keys (name, scopes, expiry, IP allow-list, last use) and the form to create one; a new
    key and its signing secret are shown once. The withdraw scope needs the second factor's code."""
    form = ApiKeyForm(request.POST or None)
    created = None
    if request.method == "POST" and form.is_valid():
        try:
            created = api_key_create(user_id=request.user.id, **form.cleaned_data)
            form = ApiKeyForm()
        except DomainError as error:
            for field, message in error.fields.items():
                form.add_error(field if field in form.fields else None, message)
    context = {
        "form": form,
        "keys": ApiKey.objects.filter(user=request.user),
        "created": created,
        "has_second_factor": user_has_second_factor(user_id=request.user.id),
    }
    return render(request, "web/api_keys.html", context, status=400 if form.errors else 200)


@login_required
@require_POST
def api_key_revoke_view(request, key_id: int):
    try:
        key = api_key_revoke(user_id=request.user.id, key_id=key_id)
        messages.success(request, f"Key {key.name} revoked.")
    except DomainError as error:
        messages.error(request, error.message)
    return redirect("web:api-keys")
