"""A trader's e-mail address, set only by opening a link sent to it.

Sign-up and the security page ask for an address and always answer the same way, whoever has it: a page that
said "this address is already in use" would tell anyone which addresses have an account here (account
enumeration: OWASP Authentication Cheat Sheet, "Authentication and Error Messages"). Instead the address itself
gets the answer: a confirmation link when it is free, a notice when another account has it. The link sets the
address only while the account still has the address it had when the link was sent (so it works once, and an
old link cannot undo a later change); the address it replaces is told. Notifications, withdrawal links and the
address book all go to the address so confirmed, never to one its owner did not prove they read.
"""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import BaseUserManager
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.urls import reverse

from apps.audit.services import audit_record
from apps.core.errors import DomainError, InvalidState, NotFound
from apps.core.links import InvalidLink, signed_token_make, signed_token_read

from .models import EMAIL_UNIQUE_INDEX
from .notifications import email_address_on_commit, site_url
from .second_factor import second_factor_check_if_enrolled
from .selectors import EMAIL_IN_USE

SALT = "accounts.email-address"
MAX_LENGTH = 254  # auth_user.email, and RFC 5321's limit on a path


class EmailInUse(DomainError):
    """The address another account confirmed first (said only to whoever opened the link sent to it)."""

    code = "email_in_use"
    status = 409

    def __init__(self):
        super().__init__(EMAIL_IN_USE, fields={"email": EMAIL_IN_USE})


def email_normalized(email: object) -> str:
    """``email`` checked (Django's ``validate_email``, at most 254 characters) with its domain lower-cased.

    Raises :class:`DomainError` (field ``email``, code ``invalid_request``) for anything else."""
    if not isinstance(email, str) or len(email.strip()) > MAX_LENGTH:
        raise DomainError("Enter a valid e-mail address.", fields={"email": "Enter a valid e-mail address."})
    email = BaseUserManager.normalize_email(email.strip())
    try:
        validate_email(email)
    except ValidationError:
        raise DomainError("Enter a valid e-mail address.", fields={"email": "Enter a valid e-mail address."}) from None
    return email


def email_confirmation_send(*, user_id: int, email: str, otp: str | None = None) -> str:
    """Ask to make ``email`` the user's address; return it normalized (:func:`email_normalized`).

    Sends, when the current transaction commits, a link that sets it (:func:`email_address_confirm`, valid
    ``EMAIL_CONFIRMATION_MAX_AGE`` seconds) to ``email``, or, when another user has it (whatever its case), a
    notice saying so to that user's address; the caller cannot tell which and must answer the same way for
    both. A user whose second factor is on gives a current code (``otp``).

    Raises :class:`DomainError` (field ``email``) for an invalid address or the user's own,
    :class:`~apps.accounts.second_factor.InvalidOtp`, :class:`NotFound` for no such user.
    """
    email = email_normalized(email)
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None:
        raise NotFound("No such user.", fields={"user": "No such user."})
    if user.email.lower() == email.lower():
        message = "This is your e-mail address already."
        raise DomainError(message, fields={"email": message})
    second_factor_check_if_enrolled(user_id=user_id, code=otp)
    owner = get_user_model().objects.filter(email__iexact=email).exclude(pk=user_id).first()
    if owner is not None:  # told at the address its owner confirmed (the case typed may differ)
        email_address_on_commit(to=owner.email, template="email_in_use", context={"username": user.username})
        return email
    token = signed_token_make(salt=SALT, payload={"id": user_id, "email": email, "was": user.email})
    link = site_url(reverse("web:email-confirm", args=[token]))
    hours = settings.EMAIL_CONFIRMATION_MAX_AGE // 3600
    email_address_on_commit(
        to=email, template="email_confirm", context={"username": user.username, "link": link, "hours": hours}
    )
    return email


@transaction.atomic
def email_address_confirm(*, token: str):
    """Set the address named by an e-mailed link's ``token``; return the user.

    Raises :class:`~apps.core.links.InvalidLink` for a bad or expired token, :class:`InvalidState` once the
    account's address is no longer the one it had when the link was sent (the link was used, or another
    change came after it), :class:`EmailInUse` when another account confirmed the address first. The address
    it replaces, if any, is told; the change is in the audit log, the user as actor.
    """
    payload = signed_token_read(salt=SALT, token=token, max_age=settings.EMAIL_CONFIRMATION_MAX_AGE)
    user_id, email, was = payload.get("id"), payload.get("email"), payload.get("was")
    if not (isinstance(user_id, int) and isinstance(email, str) and isinstance(was, str)):
        raise InvalidLink()
    users = get_user_model().objects
    try:
        with transaction.atomic():
            changed = users.filter(pk=user_id, email=was).update(email=email)
    except IntegrityError as error:
        if getattr(getattr(error.__cause__, "diag", None), "constraint_name", None) == EMAIL_UNIQUE_INDEX:
            raise EmailInUse() from None
        raise
    user = users.filter(pk=user_id).first()
    if user is None:
        raise NotFound("This account no longer exists.", fields={"token": "No such account."})
    if not changed:
        message = "This link was used already, or your e-mail address changed after it was sent."
        raise InvalidState(message, fields={"token": message})
    audit_record(
        actor_id=user_id, action="email.confirmed", object_type="auth.user", object_id=user_id,
        before={"email": was}, after={"email": email},
    )  # fmt: skip
    if was:
        email_address_on_commit(to=was, template="email_changed", context={"username": user.username, "email": email})
    return user
