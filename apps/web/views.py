"""The traders' web UI: thin views over the services and selectors of the other apps."""

import contextlib
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.db import IntegrityError, transaction
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.email_address import email_confirmation_send
from apps.accounts.models import ApiKey
from apps.accounts.reauthentication import password_confirm
from apps.accounts.second_factor import second_factor_check_if_enrolled, second_factor_require, user_has_second_factor
from apps.accounts.services import api_key_create, api_key_revoke
from apps.api.throttles import SignUpRateThrottle
from apps.core.csv_export import csv_response
from apps.core.errors import DomainError
from apps.core.session_lock import session_advisory_lock
from apps.ledger.amounts import parse_amount
from apps.ledger.errors import IdempotencyConflict
from apps.ledger.models import Asset
from apps.ledger.selectors import balances_for_user, user_postings
from apps.orders.selectors import fills_for_user_between, orders_for_user
from apps.wallets.address_book import withdrawal_address_add
from apps.wallets.custody.base import CustodyError
from apps.wallets.models import WITHDRAWAL_CANCELLABLE, Withdrawal
from apps.wallets.selectors import (
    deposit_address_for_user,
    deposits_for_user,
    withdrawal_addresses_for_user,
    withdrawal_requested_under,
    withdrawals_for_user,
)
from apps.wallets.services import (
    deposit_address_get_or_create,
    withdrawal_cancel,
    withdrawal_request,
    withdrawal_request_check,
)

from . import exports, markets
from .forms import (
    USERNAME_TAKEN,
    ActivityFilterForm,
    ApiKeyForm,
    HistoryFilterForm,
    SignUpForm,
    WithdrawalAddressForm,
    WithdrawForm,
    add_domain_error,
    with_new_key,
)
from .refused import refused_form_keep, refused_form_pop
from .security import email_link_sent_message

HISTORY_ROWS = 50
WITHDRAW_FORM = "withdraw"
API_KEY_FORM = "api-key"
ADDRESS_FORM = "withdrawal-address"
ACTIVITY_PAGE = 50


def home(request):
    """``/``: the markets, for everyone (the log-in page is one click away in the header)."""
    return markets.markets(request)


def signup(request):
    """``/signup/``: a new trader, logged in at once. An e-mail address given is sent a link that sets it
    (:func:`apps.accounts.email_address.email_confirmation_send`); the page answers the same whether or not another
    account has the address. Two sign-ups at the same time with one username: the database's unique index
    refuses the second, shown next to its field like the form's checks. The form's POSTs are rate-limited per client
    IP (``SIGNUP_RATE_PER_IP``; 429 past it)."""
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and not SignUpRateThrottle().allow_request(request, None):
        form.add_error(None, "Too many sign-ups from your network: try again later.")
        return render(request, "registration/signup.html", {"form": form}, status=429)
    if request.method == "POST" and form.is_valid():
        email = form.cleaned_data["email"]
        try:
            with transaction.atomic():
                user = form.save()
                if email:
                    email = email_confirmation_send(user_id=user.id, email=email)
        except IntegrityError:
            form.add_error("username", USERNAME_TAKEN)
            return render(request, "registration/signup.html", {"form": form})
        except DomainError as error:
            add_domain_error(form, error)
            return render(request, "registration/signup.html", {"form": form})
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, "Welcome! Your account is ready.")
        if email:
            messages.info(request, email_link_sent_message(email))
        return redirect("web:wallet")
    return render(request, "registration/signup.html", {"form": form})


def _assets() -> list[Asset]:
    return list(Asset.objects.order_by("code"))


def _asset_named(code: str) -> Asset | None:
    """The asset with this code; ``None`` for an unknown code or text no code can be."""
    if not code or len(code) > 10 or not code.isprintable():
        return None
    return Asset.objects.filter(code=code).first()


def _render_wallet(
    request, form: forms.Form | None = None, address_form: WithdrawalAddressForm | None = None, status: int = 200
):
    assets = _assets()
    form = form or WithdrawForm(assets=assets)
    selected = next((a for a in assets if a.code == form["asset"].value()), assets[0] if assets else None)
    now = timezone.now()
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
            "cancellable": WITHDRAWAL_CANCELLABLE,
            "address_book": [
                (entry, entry.status_at(now)) for entry in withdrawal_addresses_for_user(user_id=request.user.id)
            ],
            "address_form": address_form or WithdrawalAddressForm(assets=assets),
            "second_factor": user_has_second_factor(user_id=request.user.id),
        },
        status=status,
    )


@login_required
def wallet(request):
    """Balances, deposit addresses, the withdraw form and the deposit and withdrawal history; htmx polls
    for the balances table alone."""
    if request.htmx:
        return render(request, "web/_balances.html", {"balances": balances_for_user(request.user.id)})
    assets = _assets()
    refused = refused_form_pop(request, key=WITHDRAW_FORM, form_class=WithdrawForm, assets=assets)
    refused_address = refused_form_pop(request, key=ADDRESS_FORM, form_class=WithdrawalAddressForm, assets=assets)
    return _render_wallet(request, form=refused, address_form=refused_address)


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


def _withdraw_form_apply(user_id: int, data: dict) -> Withdrawal:
    """The withdraw form's request: checked before the code is spent (a typo does not use it up), the code checked
    unless the form's ``request_key`` named a withdrawal already (its replay: the code was spent on it), requested."""
    withdrawal_request_check(
        user_id=user_id,
        asset_code=data["asset"],
        amount=data["amount"],
        address=data["address"],
        request_key=data["request_key"],
    )
    if not withdrawal_requested_under(user_id=user_id, request_key=data["request_key"]):
        second_factor_require(user_id=user_id, code=data["otp"])
    return withdrawal_request(
        user_id=user_id,
        asset_code=data["asset"],
        amount=data["amount"],
        address=data["address"],
        request_key=data["request_key"],
    )


@login_required
@require_POST
def withdraw(request):
    """Request a withdrawal from the wallet page's form; a refused form goes back to the wallet page (post/redirect/
    get) with each refusal next to the field at fault."""
    form = WithdrawForm(request.POST, assets=_assets())
    if form.is_valid():
        data = form.cleaned_data
        try:
            # One post of the form at a time (a double click sends two at once): the second waits for the first's
            # withdrawal, then replays it (break-it reviews: "code already used" of a withdrawal requested).
            with session_advisory_lock(f"withdraw_form:{request.user.id}:{data['request_key']}"):
                withdrawal = _withdraw_form_apply(request.user.id, data)
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
    refused_form_keep(request, key=WITHDRAW_FORM, form=form)
    return redirect("web:wallet")


@login_required
@require_POST
def withdrawal_address_add_view(request):
    """Add an address to the withdrawal address book; the confirmation link goes out by e-mail. With a second
    factor on, a current code is required (checked before the service's transaction)."""
    form = WithdrawalAddressForm(request.POST, assets=_assets())
    if form.is_valid():
        data = form.cleaned_data
        try:
            second_factor_check_if_enrolled(user_id=request.user.id, code=data["otp"])
            entry = withdrawal_address_add(
                user_id=request.user.id, asset_code=data["asset"], address=data["address"], label=data["label"]
            )
        except DomainError as error:
            add_domain_error(form, error)
        else:
            messages.success(request, f"{entry.asset.code} address added: confirm it with the link we e-mailed you.")
            return redirect("web:wallet")
    refused_form_keep(request, key=ADDRESS_FORM, form=form)  # post/redirect/get: a reload sends nothing again
    return redirect("web:wallet")


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


def _activity_filters(request) -> ActivityFilterForm:
    return ActivityFilterForm(request.GET, assets=_assets())


def _activity_postings(form: ActivityFilterForm, user_id: int):
    data = form.cleaned_data
    return user_postings(
        user_id,
        asset_code=data["asset"] or None,
        reason=data["type"] or None,
        before_id=data.get("cursor"),
        **form.bounds(),
    )


@login_required
@require_GET
def activity(request):
    """Every change to the user's balances (one line per posting), newest first, ``ACTIVITY_PAGE`` at a time.

    Filters by asset, type (the entry's reason) and dates; ``cursor`` (the last posting shown) pages on.
    Invalid filters are a 400 naming the field.
    """
    form = _activity_filters(request)
    context: dict[str, object] = {"form": form}
    if not form.is_valid():
        return render(request, "web/activity.html", context, status=400)
    page = list(_activity_postings(form, request.user.id)[: ACTIVITY_PAGE + 1])
    context["postings"] = page[:ACTIVITY_PAGE]
    if len(page) > ACTIVITY_PAGE:
        query = request.GET.copy()
        query["cursor"] = str(page[ACTIVITY_PAGE - 1].id)
        context["next_query"] = query.urlencode()
    filters = request.GET.copy()
    filters.pop("cursor", None)
    context["filters_query"] = filters.urlencode()
    context["dates_query"] = urlencode({k: v for k, v in request.GET.items() if k in ("start", "end") and v})
    return render(request, "web/activity.html", context)


def _export_filters(request, form_class=HistoryFilterForm, **kwargs):
    """The export's filters, or a 400 response naming the field at fault."""
    form = form_class(request.GET, **kwargs)
    if not form.is_valid():
        return form, JsonResponse(
            {
                "error": {
                    "code": "invalid_request",
                    "message": "Invalid filters.",
                    "fields": form.errors.get_json_data(),
                }
            },
            status=400,
        )
    return form, None


@login_required
@require_GET
def activity_export(request):
    """The activity page's postings as CSV, with the page's filters (all pages)."""
    form, refused = _export_filters(request, ActivityFilterForm, assets=_assets())
    if refused:
        return refused
    postings = _activity_postings(form, request.user.id).iterator(chunk_size=1000)
    return csv_response("activity.csv", exports.POSTING_HEADER, exports.posting_rows(postings))


def _between(queryset, form: HistoryFilterForm, field: str = "created_at"):
    bounds = form.bounds()
    if bounds["start"] is not None:
        queryset = queryset.filter(**{f"{field}__gte": bounds["start"]})
    if bounds["end"] is not None:
        queryset = queryset.filter(**{f"{field}__lt": bounds["end"]})
    return queryset


@login_required
@require_GET
def orders_export(request):
    """Every order of the user (all markets) placed in the date range, as CSV."""
    form, refused = _export_filters(request)
    if refused:
        return refused
    orders = _between(orders_for_user(user_id=request.user.id), form).select_related("market__base", "market__quote")
    return csv_response("orders.csv", exports.ORDER_HEADER, exports.order_rows(orders.iterator(chunk_size=1000)))


@login_required
@require_GET
def fills_export(request):
    """Every fill of the user (maker or taker, all markets) in the date range, as CSV."""
    form, refused = _export_filters(request)
    if refused:
        return refused
    fills = fills_for_user_between(user_id=request.user.id, **form.bounds())
    return csv_response("fills.csv", exports.FILL_HEADER, exports.fill_rows(fills))


@login_required
@require_GET
def deposits_export(request):
    """Every deposit of the user seen in the date range, as CSV."""
    form, refused = _export_filters(request)
    if refused:
        return refused
    deposits = _between(deposits_for_user(user_id=request.user.id), form).select_related("address")
    rows = exports.deposit_rows(deposits.iterator(chunk_size=1000))
    return csv_response("deposits.csv", exports.DEPOSIT_HEADER, rows)


@login_required
@require_GET
def withdrawals_export(request):
    """Every withdrawal the user requested in the date range, as CSV."""
    form, refused = _export_filters(request)
    if refused:
        return refused
    withdrawals = _between(withdrawals_for_user(user_id=request.user.id), form)
    rows = exports.withdrawal_rows(withdrawals.iterator(chunk_size=1000))
    return csv_response("withdrawals.csv", exports.WITHDRAWAL_HEADER, rows)


@never_cache
@login_required
def api_keys(request):
    """The user's API keys (name, scopes, expiry, IP allow-list, last use) and the form to create one; a new
    key and its signing secret are shown once, on the answer to the POST that created it (they are never kept in
    the session). A refused form goes back to this page (post/redirect/get) with each refusal next to its field.
    A key needs the second factor's code when it is on (the withdraw scope needs it on), and the account's password
    when it is off (:func:`~apps.accounts.reauthentication.password_confirm`): a session alone makes no key. The
    page carries ``Cache-Control: no-store`` (``never_cache``): no browser or proxy cache keeps a secret shown."""
    created = None
    if request.method == "POST":
        form = ApiKeyForm(request.POST)
        if form.is_valid():
            fields = dict(form.cleaned_data)
            try:
                password_confirm(request, password=fields.pop("password"))
                created = api_key_create(user_id=request.user.id, password_hash=request.user.password, **fields)
            except DomainError as error:
                add_domain_error(form, error)
        if created is None:
            refused_form_keep(request, key=API_KEY_FORM, form=form)
            return redirect("web:api-keys")
        form = ApiKeyForm()
    else:
        form = refused_form_pop(request, key=API_KEY_FORM, form_class=ApiKeyForm) or ApiKeyForm()
    context = {
        "form": form,
        "keys": ApiKey.objects.filter(user=request.user),
        "created": created,
        "has_second_factor": user_has_second_factor(user_id=request.user.id),
    }
    return render(request, "web/api_keys.html", context)


@login_required
@require_POST
def api_key_revoke_view(request, key_id: int):
    try:
        key = api_key_revoke(user_id=request.user.id, key_id=key_id)
        messages.success(request, f"Key {key.name} revoked.")
    except DomainError as error:
        messages.error(request, error.message)
    return redirect("web:api-keys")
