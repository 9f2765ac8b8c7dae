"""The owner's emergency stop: freezing the account from the notice that its e-mail address was replaced.

Replacing the address needs the old one's approval, so a takeover that got it (the password and the old mailbox,
or a session and a moment of inattention) leaves the owner outside: the old address is told, but no change can be
undone from it, since the next change needs the new address's approval. The notice therefore carries a link, as
Binance's and Coinbase's security e-mails carry "disable your account": opened (a page with a button: a link
checker or preview fetching it changes nothing), it disables the account at once:

- the account can no longer log in (``is_active`` off: Django refuses its password, its sessions and a password
  reset link, and the API its keys), so whoever took it over is out of it;
- every API key is revoked, and the stream keys end (:data:`~apps.accounts.events.account_frozen`);
- trading is frozen and withdrawals blocked (:func:`~apps.accounts.restrictions.account_owner_freeze`), so that
  turning the log-in back on does not turn those on with it.

All in one transaction, audited with the owner as actor. Only operators give the account back (the user's
``active`` flag and the restrictions, each audited), once the owner has proved who they are. The link names the
e-mail request that replaced the address (signed, ``ACCOUNT_FREEZE_LINK_MAX_AGE`` seconds); opening it again after
the freeze changes nothing more.
"""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.urls import reverse

from apps.core.errors import NotFound
from apps.core.links import signed_id_read, signed_token_make

from .events import account_frozen
from .models import EmailRequest
from .notifications import site_url
from .restrictions import account_owner_freeze
from .services import api_keys_revoke_all

SALT = "accounts.account-freeze"


def account_freeze_link(*, request: EmailRequest) -> dict:
    """The link freezing the account whose address ``request`` replaced, for the notice sent to the old address:
    ``{"freeze_link", "freeze_days"}``."""
    token = signed_token_make(salt=SALT, payload={"id": request.pk})
    return {
        "freeze_link": site_url(reverse("web:account-freeze", args=[token])),
        "freeze_days": settings.ACCOUNT_FREEZE_LINK_MAX_AGE // 86400,
    }


def account_freeze_pending(*, token: str) -> EmailRequest:
    """The e-mail request a freeze link's ``token`` names, for the page asking to confirm. Raises
    :class:`~apps.core.links.InvalidLink` (bad, altered or expired token), :class:`NotFound` (no such request)."""
    request_id = signed_id_read(salt=SALT, token=token, max_age=settings.ACCOUNT_FREEZE_LINK_MAX_AGE)
    request = EmailRequest.objects.select_related("user").filter(pk=request_id).first()
    if request is None:
        raise NotFound("This account no longer exists.", fields={"token": "No such account."})
    return request


@transaction.atomic
def account_freeze(*, token: str):
    """Disable the account a freeze link's ``token`` names (see the module); return the user. Raises as
    :func:`account_freeze_pending` does."""
    request = account_freeze_pending(token=token)
    user = get_user_model().objects.select_for_update().get(pk=request.user_id)
    reason = f"Frozen by the account's owner from the notice that its e-mail address was changed to {request.email}."
    account_owner_freeze(user_id=user.pk, reason=reason)
    api_keys_revoke_all(user_id=user.pk, reason="account_frozen")
    if user.is_active:
        user.is_active = False
        user.save(update_fields=["is_active"])
    account_frozen.send(sender=get_user_model(), user_id=user.pk)
    return user
