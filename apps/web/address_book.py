"""Deleting from the withdrawal address book, and the pages the links e-mailed to traders open (:func:`confirm_page`,
also the e-mail address's).

A link opens a page with one button; the change happens on its POST, so a mail scanner
that fetches links confirms nothing.
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.core.errors import DomainError
from apps.wallets.address_book import (
    withdrawal_address_confirm,
    withdrawal_address_delete,
    withdrawal_address_link_read,
)
from apps.wallets.services import withdrawal_confirm, withdrawal_link_read


@login_required
@require_POST
def withdrawal_address_delete_view(request, entry_id: int):
    """Remove an address from the book."""
    try:
        withdrawal_address_delete(user_id=request.user.id, entry_id=entry_id)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, "Address removed from your address book.")
    return redirect("web:wallet")


def confirm_page(request, token: str, *, what: str, confirm, read):
    """GET: a page with a confirm button, or why the link cannot confirm anything (``read(token=...)`` refuses it:
    malformed, altered, another purpose's or expired; what it returns is the page's ``pending``). POST: confirm; the
    outcome (or why not) on the same page."""
    context = {"what": what, "token": token}
    try:
        if request.method != "POST":
            context["pending"] = read(token=token)
            return render(request, "web/confirm_link.html", context)
        context["done"] = confirm(token=token)
    except DomainError as error:
        context["error"] = error.message
        return render(request, "web/confirm_link.html", context, status=error.status)
    return render(request, "web/confirm_link.html", context)


def withdrawal_address_confirm_view(request, token: str):
    """The e-mailed link that confirms a new withdrawal address (no log-in needed: the link is the proof)."""
    return confirm_page(
        request, token, what="withdrawal address", confirm=withdrawal_address_confirm, read=withdrawal_address_link_read
    )


def withdrawal_confirm_view(request, token: str):
    """The e-mailed link that confirms a large withdrawal."""
    return confirm_page(request, token, what="withdrawal", confirm=withdrawal_confirm, read=withdrawal_link_read)
