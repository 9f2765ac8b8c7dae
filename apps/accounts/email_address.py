"""A trader's e-mail address, set only by opening a link sent to it.

Sign-up and the security page ask for an address and always answer the same way, whoever has it: a page that
said "this address is already in use" would tell anyone which addresses have an account here (account
enumeration: OWASP Authentication Cheat Sheet, "Authentication and Error Messages"). Instead the address itself
gets the answer: a confirmation link when it is free, a notice when another account has it. Each request is a
row (:class:`~apps.accounts.models.EmailRequest`) that its link names: the link sets the address once, and a newer
request of the user retires the older links, so no old link can undo a later change; the address replaced is
told. Replacing an address needs that address's consent first: a link sent to it approves the change
(:func:`email_change_approve`), and only then is the new address written to, as Binance asks for codes from both
addresses. Without it, a password alone (phished, reused) let whoever had it enrol their own authenticator, move
the address to their own mailbox and, with it, the withdrawal addresses' and withdrawals' confirmations (break-it
review). The rows also cap the requests (``EMAIL_REQUESTS_PER_DAY``): per user, refused in so many words; per
address, more messages are not sent (quietly, so the cap tells nothing either), so nobody can use the exchange
to flood an address. Notifications, withdrawal links and the address book all go to the address so confirmed,
never to one its owner did not prove they read.
"""

import logging
import re
from datetime import timedelta

import idna
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import BaseUserManager
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Lower
from django.urls import reverse
from django.utils import timezone

from apps.audit.services import audit_record
from apps.core.errors import DomainError, InvalidState, NotFound, violated_constraint
from apps.core.links import signed_id_read, signed_token_make

from .holds import withdrawals_hold
from .models import EMAIL_UNIQUE_INDEX, EmailRequest, HoldReason
from .notifications import email_address_on_commit, site_url
from .second_factor import second_factor_check_if_enrolled
from .selectors import EMAIL_IN_USE

SALT = "accounts.email-request"
APPROVAL_SALT = "accounts.email-change-approval"
MAX_LENGTH = 254  # auth_user.email, and RFC 5321's limit on a path
MAX_LOCAL_LENGTH = 64  # RFC 5321 section 4.5.3.1.1
INVALID = "Enter a valid e-mail address (letters of the English alphabet before the @)."
DOT_ATOM = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*")
"""A local part as RFC 5322 section 3.4.1's ``dot-atom`` (ASCII letters, digits and ``atext`` symbols, dots between
them): no quoted string, which Django's validator accepts (``"<script>alert(1)</script>"@example.com``: break-it
review), and nothing a mailbox provider would not hand out."""

log = logging.getLogger(__name__)


class EmailInUse(DomainError):
    """The address another account confirmed first (said only to whoever opened the link sent to it)."""

    code = "email_in_use"
    status = 409

    def __init__(self):
        super().__init__(EMAIL_IN_USE, fields={"email": EMAIL_IN_USE})


class TooManyEmailRequests(DomainError):
    """The user asked for ``EMAIL_REQUESTS_PER_DAY`` addresses in the last 24 hours already."""

    code = "too_many_requests"
    status = 429

    def __init__(self):
        message = "Too many e-mail address requests today: try again tomorrow."
        super().__init__(message, fields={"email": message})


def email_normalized(email: object) -> str:
    """``email`` checked (Django's ``validate_email``; an ASCII local part of at most 64 characters and a domain
    name, RFC 5321 section 4.5.3.1; at most 254 characters in all) with its domain lower-cased and, if
    internationalised, in its ASCII form (IDNA 2008 with UTS #46 non-transitional mapping, the ``idna`` package:
    ``straße.de`` stays itself, ``xn--strae-oqa.de``), so the address compares and is delivered as stored.
    Raises :class:`DomainError` (field ``email``, code ``invalid_request``) for anything else.

    An ASCII local part: letters such as the Kelvin sign or the long s pass Django's validator, yet change under
    case folding (``K``, ``s``), so they could pose as another account's address, and mail to them is not
    deliverable as the header encodes them. A domain literal (``a@[127.0.0.1]``) names no mail domain. The local
    part is a :data:`DOT_ATOM`."""
    if not isinstance(email, str) or len(email.strip()) > MAX_LENGTH:
        raise DomainError(INVALID, fields={"email": INVALID})
    email = BaseUserManager.normalize_email(email.strip())
    local, _, domain = email.rpartition("@")
    try:
        validate_email(email)
        email = f"{local}@{idna.encode(domain, uts46=True, transitional=False).decode('ascii')}"
    except (ValidationError, idna.IDNAError, UnicodeError):
        raise DomainError(INVALID, fields={"email": INVALID}) from None
    if (
        not DOT_ATOM.fullmatch(local)
        or len(local) > MAX_LOCAL_LENGTH
        or domain.startswith("[")
        or len(email) > MAX_LENGTH
    ):
        raise DomainError(INVALID, fields={"email": INVALID})
    return email


def email_confirmation_send(*, user_id: int, email: str, otp: str | None = None) -> str:
    """Ask to make ``email`` the user's address; return it normalized (:func:`email_normalized`).

    Records the request (retiring the user's earlier ones) and, when the transaction commits, sends to the user's
    current address, if any, a link that approves the change (:func:`email_change_approve`, valid
    ``EMAIL_CONFIRMATION_MAX_AGE`` seconds); with no current address, or once approved, ``email`` gets a link that
    sets it (:func:`email_address_confirm`, valid as long), or, when another user has it (whatever its case), a
    notice saying so goes to that user's address; the caller cannot tell which and must answer the same way for
    both. Past ``EMAIL_REQUESTS_PER_DAY`` requests naming the address in 24 hours, nothing more is sent to it
    (logged). A user whose second factor is on gives a current code (``otp``, checked first: call this outside a
    transaction, so a wrong code counts against the user); one without gives their password to the caller
    (:func:`apps.accounts.reauthentication.password_confirm`).

    Raises :class:`DomainError` (field ``email``) for an invalid address or the user's own,
    :class:`TooManyEmailRequests` past ``EMAIL_REQUESTS_PER_DAY`` requests of the user in 24 hours,
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
    with transaction.atomic():
        # The user's requests, then the address's, are counted one at a time.
        _user_locked(user_id)
        _address_locked(email)
        _request_record(user, email)
    return email


def _request_record(user, email: str) -> None:
    """:func:`email_confirmation_send`'s writes, in its transaction: the count, the row, the message on commit."""
    user_id = user.pk
    now = timezone.now()
    if EmailRequest.objects.filter(user_id=user_id, created_at__gte=now - timedelta(days=1)).count() >= (
        settings.EMAIL_REQUESTS_PER_DAY
    ):
        raise TooManyEmailRequests()
    EmailRequest.objects.open().filter(user_id=user_id).update(superseded_at=now)
    if not user.email:
        request = EmailRequest(user_id=user_id, email=email, created_at=now)
        _new_address_tell(user, request)
        return
    request = EmailRequest.objects.create(
        user_id=user_id, email=email, approval_needed=True, link_sent=False, message_sent=False, created_at=now
    )
    context = {
        "username": user.username,
        "email": email,
        "time": now,
        **_link("web:email-approve", APPROVAL_SALT, request),
    }
    email_address_on_commit(to=user.email, template="email_change_approve", context=context)


def _new_address_tell(user, request: EmailRequest) -> None:
    """Save ``request`` with what its new address is sent when the transaction commits: the link that sets it, or
    (another account has it) a notice to that account's address, or nothing past the address's day of messages.
    Call it holding the address's advisory lock (see :func:`email_confirmation_send`)."""
    email = request.email
    limit = settings.EMAIL_REQUESTS_PER_DAY
    since = timezone.now() - timedelta(days=1)
    to_address = EmailRequest.objects.alias(address=Lower("email")).filter(address=email.lower(), created_at__gte=since)
    quiet = to_address.filter(message_sent=True).count() >= limit
    owner = get_user_model().objects.filter(email__iexact=email).exclude(pk=user.pk).first()
    request.link_sent, request.message_sent = owner is None, not quiet
    request.save()
    if quiet:
        log.warning("accounts.email_request_not_sent", extra={"request": request.pk, "reason": "address_cap"})
    elif owner is not None:  # told at the address its owner confirmed (the case typed may differ)
        email_address_on_commit(to=owner.email, template="email_in_use", context={})
    else:
        context = {"username": user.username, **_link("web:email-confirm", SALT, request)}
        email_address_on_commit(to=email, template="email_confirm", context=context)


def _link(view: str, salt: str, request: EmailRequest) -> dict:
    """The e-mailed link to ``view`` naming ``request`` (signed with ``salt``) and the hours it works, as the
    messages' context: ``{"link", "hours"}``."""
    token = signed_token_make(salt=salt, payload={"id": request.pk})
    return {"link": site_url(reverse(view, args=[token])), "hours": settings.EMAIL_CONFIRMATION_MAX_AGE // 3600}


def _address_locked(email: str) -> None:
    """Take the transaction's advisory lock of ``email`` (any case): the messages an address is sent are counted one
    request at a time."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", [SALT, email.lower()])


def email_approval_link_read(*, token: str) -> int:
    """The e-mail request id an approval link's ``token`` names (nothing is read or written); raises
    :class:`~apps.core.links.InvalidLink` for a bad token, another purpose's, or one older than
    ``EMAIL_CONFIRMATION_MAX_AGE`` seconds."""
    return signed_id_read(salt=APPROVAL_SALT, token=token, max_age=settings.EMAIL_CONFIRMATION_MAX_AGE)


def email_change_pending(*, token: str) -> EmailRequest:
    """The change an approval link's ``token`` names, while it may still be approved (what its page shows before the
    button: the new address). Raises as :func:`email_change_approve` would, without writing anything."""
    request = EmailRequest.objects.filter(pk=email_approval_link_read(token=token), approval_needed=True).first()
    if request is None:
        raise NotFound("This account no longer exists.", fields={"token": "No such account."})
    _approvable_check(request)
    return request


def _approvable_check(request: EmailRequest) -> None:
    if request.approved_at is not None or request.superseded_at is not None:
        message = "This link was used already, or the change was cancelled or replaced by a newer one."
        raise InvalidState(message, fields={"token": message})


@transaction.atomic
def email_change_approve(*, token: str) -> EmailRequest:
    """Approve the change an approval link (sent to the user's current address) names: the new address is then sent
    its message (:func:`_new_address_tell`) when the transaction commits; return the request. Audited
    (``email.change_approved``, the user as actor).

    Raises :class:`~apps.core.links.InvalidLink` for a bad or expired token, :class:`InvalidState` once it was
    approved, cancelled, or a newer request retired it, :class:`NotFound` when the account is gone.
    """
    user, request = _request_locked(email_approval_link_read(token=token), approval_needed=True)
    _approvable_check(request)
    _address_locked(request.email)
    request.approved_at = timezone.now()
    _new_address_tell(user, request)
    audit_record(
        actor_id=user.pk, action="email.change_approved", object_type="auth.user", object_id=user.pk,
        before={"email": user.email}, after={"email": request.email},
    )  # fmt: skip
    return request


@transaction.atomic
def email_requests_cancel(*, user_id: int) -> int:
    """Retire the user's open requests for a new address, so no link sent for one works any more (a mistyped
    address, say); return how many were open."""
    _user_locked(user_id)
    return EmailRequest.objects.open().filter(user_id=user_id).update(superseded_at=timezone.now())


def _request_locked(request_id: int, **condition) -> tuple:
    """The user and the request ``request_id`` (when it meets ``condition``), both locked, the user's row first (see
    :func:`_user_locked`); raises :class:`NotFound` when either is gone."""
    user_id = EmailRequest.objects.filter(pk=request_id, **condition).values_list("user_id", flat=True).first()
    user = _user_locked(user_id)
    request = EmailRequest.objects.select_for_update().filter(pk=request_id).first()
    if user is None or request is None:
        raise NotFound("This account no longer exists.", fields={"token": "No such account."})
    return user, request


def _user_locked(user_id: int | None):
    """The user's row, locked for the transaction (None when there is none). Every write of a user's requests takes
    it first, before any request row, so two of them never wait on each other in opposite orders."""
    return get_user_model().objects.select_for_update().filter(pk=user_id).first() if user_id is not None else None


def email_link_read(*, token: str) -> int:
    """The e-mail request id an e-mailed confirmation link's ``token`` names (nothing is read from the database or
    written); raises :class:`~apps.core.links.InvalidLink` for a bad token or one older than
    ``EMAIL_CONFIRMATION_MAX_AGE`` seconds."""
    return signed_id_read(salt=SALT, token=token, max_age=settings.EMAIL_CONFIRMATION_MAX_AGE)


@transaction.atomic
def email_address_confirm(*, token: str):
    """Set the address of the request an e-mailed link's ``token`` names; return the user.

    Raises :class:`~apps.core.links.InvalidLink` for a bad or expired token, :class:`InvalidState` once the link
    was used or a newer request of the user retired it, :class:`EmailInUse` when another account confirmed the
    address first, :class:`NotFound` when the account is gone. The address it replaces, if any, is told; the
    change is in the audit log, the user as actor.
    """
    user, request = _request_locked(email_link_read(token=token), link_sent=True)
    if request.confirmed_at is not None or request.superseded_at is not None:
        message = "This link was used already, or a newer request for another address replaced it."
        raise InvalidState(message, fields={"token": message})
    was = user.email
    try:
        with transaction.atomic():
            get_user_model().objects.filter(pk=user.pk).update(email=request.email)
    except IntegrityError as error:
        if violated_constraint(error) == EMAIL_UNIQUE_INDEX:
            raise EmailInUse() from None
        raise
    request.confirmed_at = timezone.now()
    request.save(update_fields=["confirmed_at"])
    user.email = request.email
    audit_record(
        actor_id=user.pk, action="email.confirmed", object_type="auth.user", object_id=user.pk,
        before={"email": was}, after={"email": request.email},
    )  # fmt: skip
    if was:  # a replaced address, not the first one set: whoever replaced it may have taken the account over
        held_until = withdrawals_hold(user_id=user.pk, reason=HoldReason.EMAIL_CHANGED, actor_id=user.pk)
        email_address_on_commit(
            to=was,
            template="email_changed",
            context={"username": user.username, "email": request.email, "held_until": held_until},
        )
    return user
