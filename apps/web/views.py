"""The traders' web UI: thin views over the services and selectors of the other apps."""

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.accounts.models import ApiKey
from apps.accounts.services import api_key_create, api_key_revoke
from apps.ledger.errors import DomainError
from apps.ledger.selectors import balances_for_user, user_postings

from .forms import ApiKeyForm, SignUpForm


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


@login_required
def wallet(request):
    """Balances per asset; htmx polls for the balances table alone."""
    template = "web/_balances.html" if request.htmx else "web/wallet.html"
    return render(request, template, {"balances": balances_for_user(request.user.id)})


@login_required
def activity(request):
    asset = request.GET.get("asset") or None
    postings = user_postings(request.user.id, asset_code=asset)[:200]
    return render(request, "web/activity.html", {"postings": postings, "asset": asset})


@login_required
def api_keys(request):
    form = ApiKeyForm(request.POST or None)
    new_key = None
    if request.method == "POST" and form.is_valid():
        try:
            _, new_key = api_key_create(
                user_id=request.user.id,
                name=form.cleaned_data["name"],
                scopes=form.cleaned_data["scopes"],
                withdrawal_addresses=form.cleaned_data["withdrawal_addresses"],
            )
            form = ApiKeyForm()
        except DomainError as error:
            for field, message in error.fields.items():
                form.add_error(field if field in form.fields else None, message)
    keys = ApiKey.objects.filter(user=request.user)
    return render(request, "web/api_keys.html", {"form": form, "keys": keys, "new_key": new_key})


@login_required
@require_POST
def api_key_revoke_view(request, key_id: int):
    try:
        key = api_key_revoke(user_id=request.user.id, key_id=key_id)
        messages.success(request, f"Key {key.name} revoked.")
    except DomainError as error:
        messages.error(request, error.message)
    return redirect("web:api-keys")
