"""Writes of the withdrawal address book: add an address, confirm it by e-mail link, delete it; the rule
that withdrawals go only to an ``active`` address of the user's book.

A new address is ``pending_confirmation`` until the user follows the link e-mailed to them
(signed, single-use, valid ``WITHDRAWAL_ADDRESS_CONFIRMATION_MAX_AGE`` seconds), then
``cooling_off`` for ``WITHDRAWAL_ADDRESS_COOLING_OFF_SECONDS``, then ``active``. So someone who
takes over a session (or a password) cannot send the funds to an address of theirs at once:
they need the user's mailbox too, and the user has a day to notice the e-mail.
"""

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from apps.accounts.notifications import email_user_on_commit, site_url
from apps.core.addresses import address_validate
from apps.core.errors import DomainError, InvalidAddress, InvalidState, NotFound
from apps.core.reasons import hidden_characters_refuse
from apps.ledger.models import Asset
from apps.ledger.transactions import retrying_atomic

from .errors import UNKNOWN_ASSET, unknown_asset_message
from .links import link_token_make, link_token_read
from .models import DepositAddress, WithdrawalAddress, WithdrawalAddressStatus

LINK_PURPOSE = "withdrawal-address"
MAX_LABEL_LENGTH = 100


class AddressNotAllowed(DomainError):
    """A withdrawal to an address that is not ``active`` in the user's address book for that asset."""

    code = "address_not_allowed"

    def __init__(self, message: str):
        super().__init__(message, fields={"address": message})


def _label(label: str) -> str:
    if isinstance(label, str):
        hidden_characters_refuse(label, field="label")  # its own message (break-it review: "\u202e" was "too long")
    if not isinstance(label, str) or len(label) > MAX_LABEL_LENGTH or not label.isprintable():
        message = f"At most {MAX_LABEL_LENGTH} printable characters."
        raise DomainError(message, fields={"label": message})
    return label.strip()


def own_deposit_address(asset: Asset, address: str) -> DepositAddress | None:
    """Our deposit address ``address`` on ``asset``'s network if it is one, else None.

    Raises :class:`InvalidAddress` when it is our deposit address for another asset: on a real
    chain those coins would be lost or credited in the wrong asset.
    """
    own = DepositAddress.objects.select_related("asset").filter(network=asset.network, address=address).first()
    if own is not None and own.asset_id != asset.id:
        raise InvalidAddress(
            f"{address} is one of our deposit addresses for {own.asset.code}: it cannot receive {asset.code}."
        )
    return own


@retrying_atomic
def withdrawal_address_add(*, user_id: int, asset_code: str, address: str, label: str = "") -> WithdrawalAddress:
    """Add ``address`` (valid on the asset's network) to the user's book, ``pending_confirmation``, and e-mail
    them the confirmation link (on commit).

    The caller first checks the second factor when the user has one
    (:func:`~apps.accounts.second_factor.second_factor_check_if_enrolled`), outside any transaction so
    that a wrong code counts against django-otp's throttle. Raises :class:`DomainError` naming
    ``asset``, ``label``, ``email`` (the user has no e-mail address to confirm with) or
    ``address`` (already in the book), :class:`~apps.core.errors.InvalidAddress`. Nothing is
    written when it raises.
    """
    asset = Asset.objects.filter(code=asset_code).first() if isinstance(asset_code, str) else None
    if asset is None:
        raise DomainError(unknown_asset_message(asset_code), fields={"asset": UNKNOWN_ASSET})
    address_validate(network=asset.network, address=address)
    own_deposit_address(asset, address)  # another asset's deposit address of ours: a withdrawal would be refused
    label = _label(label)
    if not get_user_model().objects.filter(pk=user_id).exclude(email="").exists():
        message = "Your account needs an e-mail address to confirm withdrawal addresses: add one on the security page."
        raise DomainError(message, fields={"email": message})
    try:
        with transaction.atomic():
            entry = WithdrawalAddress.objects.create(
                user_id=user_id, asset=asset, network=asset.network, address=address, label=label
            )
    except IntegrityError:
        message = "This address is already in your address book."
        raise DomainError(message, fields={"address": message}) from None
    token = link_token_make(purpose=LINK_PURPOSE, object_id=entry.pk)
    email_user_on_commit(
        user_id=user_id,
        template="withdrawal_address_confirm",
        context={
            "entry": entry,
            "link": site_url(reverse("web:withdrawal-address-confirm", args=[token])),
            "hours": settings.WITHDRAWAL_ADDRESS_CONFIRMATION_MAX_AGE // 3600,
            "cooling_off_hours": settings.WITHDRAWAL_ADDRESS_COOLING_OFF_SECONDS / 3600,
        },
    )
    return entry


def withdrawal_address_link_read(*, token: str) -> int:
    """The address book entry id an e-mailed confirmation link's ``token`` names (nothing is read from the database
    or written); raises :class:`~apps.wallets.links.InvalidLink` for a bad token or one older than
    ``WITHDRAWAL_ADDRESS_CONFIRMATION_MAX_AGE`` seconds."""
    return link_token_read(purpose=LINK_PURPOSE, token=token, max_age=settings.WITHDRAWAL_ADDRESS_CONFIRMATION_MAX_AGE)


@retrying_atomic
def withdrawal_address_confirm(*, token: str) -> WithdrawalAddress:
    """Confirm the address named by an e-mailed link's ``token``: it becomes usable after the cooling-off period
    (``usable_from``). Single-use: raises :class:`InvalidState` once confirmed, :class:`~apps.wallets.links.InvalidLink`
    for a bad or expired token, :class:`NotFound` once the entry was deleted.
    """
    entry_id = withdrawal_address_link_read(token=token)
    now = timezone.now()
    usable_from = now + timedelta(seconds=settings.WITHDRAWAL_ADDRESS_COOLING_OFF_SECONDS)
    confirmed = WithdrawalAddress.objects.filter(pk=entry_id, confirmed_at__isnull=True).update(
        confirmed_at=now, usable_from=usable_from
    )
    entry = WithdrawalAddress.objects.select_related("asset").filter(pk=entry_id).first()
    if entry is None:
        raise NotFound("This address is no longer in the address book.", fields={"token": "Deleted."})
    if not confirmed:
        raise InvalidState("This address was already confirmed; the link works once.", fields={"token": "Used."})
    return entry


@transaction.atomic
def withdrawal_address_delete(*, user_id: int, entry_id: int) -> None:
    """Remove an entry from the user's book. Raises :class:`NotFound` for another user's or an unknown entry."""
    deleted, _ = WithdrawalAddress.objects.filter(pk=entry_id, user_id=user_id).delete()
    if not deleted:
        raise NotFound("No such address in your address book.", fields={"id": "No such address."})


def withdrawal_address_require_active(*, user_id: int, asset: Asset, address: str) -> None:
    """Refuse (:class:`AddressNotAllowed`, field ``address``) unless ``address`` is ``active`` in the user's book
    for ``asset``. Run it in the transaction that holds the withdrawal's funds."""
    entry = WithdrawalAddress.objects.filter(user_id=user_id, asset=asset, address=address).first()
    status = entry.status_at(timezone.now()) if entry else None
    if status == WithdrawalAddressStatus.ACTIVE:
        return
    if status == WithdrawalAddressStatus.PENDING_CONFIRMATION:
        raise AddressNotAllowed("Confirm this address with the link we e-mailed you first.")
    if status == WithdrawalAddressStatus.COOLING_OFF and entry is not None:
        raise AddressNotAllowed(f"This address can be used from {entry.usable_from:%Y-%m-%d %H:%M} UTC.")
    raise AddressNotAllowed(f"Add this address to your {asset.code} address book first.")
