"""The links a request for a new e-mail address sends, as tokens (what the messages carry)."""

from apps.accounts.email_address import APPROVAL_SALT, SALT, email_change_approve, email_confirmation_send
from apps.accounts.models import EmailRequest
from apps.core.links import signed_token_make


def approval_for(request: EmailRequest) -> str:
    """The token of the link that approves ``request``, sent to the user's current address."""
    return signed_token_make(salt=APPROVAL_SALT, payload={"id": request.pk})


def link_for(user, email: str) -> str:
    """Ask for ``email`` as the user's address (approved by the current one, if any); return the token of the link
    the message to ``email`` carries."""
    email_confirmation_send(user_id=user.id, email=email)
    request = EmailRequest.objects.filter(user=user).latest("id")
    if request.approval_needed:
        email_change_approve(token=approval_for(request))
    return signed_token_make(salt=SALT, payload={"id": request.pk})
