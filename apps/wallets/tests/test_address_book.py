"""The withdrawal address book (API.md): pending_confirmation -> (e-mail link) cooling_off -> active; withdrawals
go only to active entries of the user's own book."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts.tests.otp import enrol, user_code
from apps.core.errors import InvalidAddress, InvalidState, NotFound
from apps.ledger.tests.factories import UserFactory, fund
from apps.wallets.address_book import (
    AddressNotAllowed,
    withdrawal_address_add,
    withdrawal_address_confirm,
    withdrawal_address_require_active,
)
from apps.wallets.custody.simnet import new_address
from apps.wallets.links import InvalidLink, link_token_make
from apps.wallets.models import Withdrawal, WithdrawalAddress
from apps.wallets.services import deposit_address_get_or_create

pytestmark = pytest.mark.django_db

BOOK = "/api/v1/withdrawal-addresses/"


def token_for(entry: WithdrawalAddress) -> str:
    """The token of the link e-mailed for ``entry`` (the e-mail itself is tested in test_emails.py)."""
    return link_token_make(purpose="withdrawal-address", object_id=entry.pk)


def test_a_new_address_is_usable_only_after_confirmation_and_the_cooling_off(usdt, user, settings):
    settings.WITHDRAWAL_ADDRESS_COOLING_OFF_SECONDS = 3600
    address = new_address()
    entry = withdrawal_address_add(user_id=user.id, asset_code="USDT", address=address, label="cold wallet")
    assert entry.status_at(timezone.now()) == "pending_confirmation"
    with pytest.raises(AddressNotAllowed, match="Confirm this address"):
        withdrawal_address_require_active(user_id=user.id, asset=usdt, address=address)

    confirmed = withdrawal_address_confirm(token=token_for(entry))

    assert confirmed.usable_from == confirmed.confirmed_at + timedelta(seconds=3600)
    assert confirmed.status_at(timezone.now()) == "cooling_off"
    with pytest.raises(AddressNotAllowed, match="can be used from"):
        withdrawal_address_require_active(user_id=user.id, asset=usdt, address=address)
    assert confirmed.status_at(confirmed.usable_from) == "active"


def test_the_confirmation_link_works_once_and_only_for_its_purpose_and_age(usdt, user, settings):
    entry = withdrawal_address_add(user_id=user.id, asset_code="USDT", address=new_address())
    with pytest.raises(InvalidLink):
        withdrawal_address_confirm(token=token_for(entry) + "x")
    with pytest.raises(InvalidLink):
        withdrawal_address_confirm(token=link_token_make(purpose="withdrawal", object_id=entry.pk))
    settings.WITHDRAWAL_ADDRESS_CONFIRMATION_MAX_AGE = -1  # every link is too old
    with pytest.raises(InvalidLink, match="expired"):
        withdrawal_address_confirm(token=token_for(entry))
    assert WithdrawalAddress.objects.get(pk=entry.pk).confirmed_at is None

    settings.WITHDRAWAL_ADDRESS_CONFIRMATION_MAX_AGE = 3600
    withdrawal_address_confirm(token=token_for(entry))
    with pytest.raises(InvalidState):
        withdrawal_address_confirm(token=token_for(entry))
    token = token_for(entry)
    entry.delete()
    with pytest.raises(NotFound):
        withdrawal_address_confirm(token=token)


def test_api_lists_adds_and_deletes_and_withdrawals_need_an_active_entry(usdt, user, api_as, settings):
    settings.WITHDRAWAL_ADDRESS_COOLING_OFF_SECONDS = 0
    fund(user, usdt, "100")
    client = api_as(user, "read", "withdraw")
    address = new_address()
    withdrawal = {"asset": "USDT", "amount": "10", "address": address}

    refused = client.post("/api/v1/withdrawals/", withdrawal, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "address_not_allowed"
    assert list(refused.json()["error"]["fields"]) == ["address"]

    added = client.post(BOOK, {"asset": "USDT", "address": address, "label": "ledger"}, format="json")
    assert added.status_code == 201
    assert added.json() == {
        "id": added.json()["id"],
        "asset": "USDT",
        "address": address,
        "label": "ledger",
        "status": "pending_confirmation",
        "usable_from": None,
    }
    assert client.post("/api/v1/withdrawals/", withdrawal, format="json").json()["error"]["code"] == (
        "address_not_allowed"
    )
    withdrawal_address_confirm(token=token_for(WithdrawalAddress.objects.get()))
    assert client.get(BOOK).json()[0]["status"] == "active"
    assert client.post("/api/v1/withdrawals/", withdrawal, format="json").status_code == 201

    assert client.delete(f"{BOOK}{added.json()['id']}/").status_code == 204
    assert client.get(BOOK).json() == []
    assert client.post("/api/v1/withdrawals/", withdrawal, format="json").status_code == 400
    assert Withdrawal.objects.count() == 1


def test_another_users_book_entry_neither_shows_nor_counts(usdt, user, api_as, settings):
    settings.WITHDRAWAL_ADDRESS_COOLING_OFF_SECONDS = 0
    owner = UserFactory()
    entry = withdrawal_address_add(user_id=owner.id, asset_code="USDT", address=new_address())
    withdrawal_address_confirm(token=token_for(entry))
    fund(user, usdt, "100")
    client = api_as(user, "read", "withdraw")

    assert client.get(BOOK).json() == []
    assert client.delete(f"{BOOK}{entry.id}/").status_code == 404
    refused = client.post(
        "/api/v1/withdrawals/", {"asset": "USDT", "amount": "10", "address": entry.address}, format="json"
    )
    assert refused.json()["error"]["code"] == "address_not_allowed"
    assert WithdrawalAddress.objects.filter(pk=entry.pk).exists()


def test_an_entry_is_for_one_asset(usdt, btc, user):
    address = new_address()
    entry = withdrawal_address_add(user_id=user.id, asset_code="USDT", address=address)
    WithdrawalAddress.objects.filter(pk=entry.pk).update(confirmed_at=timezone.now(), usable_from=timezone.now())
    withdrawal_address_require_active(user_id=user.id, asset=usdt, address=address)
    with pytest.raises(AddressNotAllowed, match="BTC address book"):
        withdrawal_address_require_active(user_id=user.id, asset=btc, address=address)


def test_our_deposit_address_of_another_asset_cannot_be_added(usdt, btc, user):
    """Break-it review: a BTC deposit address of ours was added to the ETH book and reached ``active``, and every
    withdrawal to it was then refused ``invalid_address``: it is refused when added."""
    ours = deposit_address_get_or_create(user_id=UserFactory().id, asset=btc).address
    with pytest.raises(InvalidAddress, match=f"{ours} is one of our deposit addresses for BTC: it cannot receive USDT"):
        withdrawal_address_add(user_id=user.id, asset_code="USDT", address=ours)
    assert not WithdrawalAddress.objects.exists()
    assert withdrawal_address_add(user_id=user.id, asset_code="BTC", address=ours).asset == btc  # its own asset: fine


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"asset": "USDT", "address": "sim1" + "0" * 40}, "invalid_address", "address"),
        ({"asset": "DOGE", "address": new_address()}, "invalid_request", "asset"),
        ({"asset": "USDT", "address": new_address(), "label": "x" * 101}, "invalid_request", "label"),
        ({"asset": "USDT", "address": new_address(), "label": "a\nb"}, "invalid_request", "label"),
        ({"asset": "USDT"}, "invalid_request", "address"),
    ],
)
def test_bad_entries_are_refused_naming_the_field_and_nothing_is_written(usdt, user, api_as, body, code, field):
    response = api_as(user, "withdraw").post(BOOK, body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert field in response.json()["error"]["fields"]
    assert not WithdrawalAddress.objects.exists()


def test_a_label_with_an_invisible_character_is_refused_saying_so(usdt, user, api_as):
    """Break-it review: a right-to-left override in an 8-character label was refused as "At most 100 printable
    characters"."""
    body = {"asset": "USDT", "address": new_address(), "label": "\u202egnp.exe"}
    response = api_as(user, "withdraw").post(BOOK, body, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "label": "Control and invisible formatting characters are not allowed."
    }
    assert not WithdrawalAddress.objects.exists()


def test_the_same_address_twice_is_refused(usdt, user, api_as):
    client = api_as(user, "withdraw")
    body = {"asset": "USDT", "address": new_address()}
    assert client.post(BOOK, body, format="json").status_code == 201
    again = client.post(BOOK, body, format="json")
    assert again.status_code == 400 and "already in your address book" in again.json()["error"]["fields"]["address"]


def test_a_user_without_an_e_mail_address_cannot_add_one(usdt, api_as):
    user = UserFactory(email="")
    response = api_as(user, "withdraw").post(BOOK, {"asset": "USDT", "address": new_address()}, format="json")
    assert response.status_code == 400 and "email" in response.json()["error"]["fields"]
    assert not WithdrawalAddress.objects.exists()


def test_adding_needs_the_second_factor_once_it_is_on(usdt, user, client):
    enrol(user)
    client.force_login(user)
    body = {"asset": "USDT", "address": new_address()}

    refused = client.post(BOOK, body, content_type="application/json")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_otp"
    assert not WithdrawalAddress.objects.exists()

    added = client.post(BOOK, {**body, "otp": user_code(user)}, content_type="application/json")
    assert added.status_code == 201


def test_a_session_withdrawal_needs_a_second_factor(usdt, user, client, settings):
    settings.WITHDRAWAL_ADDRESS_COOLING_OFF_SECONDS = 0
    fund(user, usdt, "100")
    entry = withdrawal_address_add(user_id=user.id, asset_code="USDT", address=new_address())
    withdrawal_address_confirm(token=token_for(entry))
    client.force_login(user)
    body = {"asset": "USDT", "amount": "10", "address": entry.address}

    without = client.post("/api/v1/withdrawals/", body, content_type="application/json")
    assert without.status_code == 403 and without.json()["error"]["code"] == "second_factor_required"
    enrol(user)
    client.force_login(
        user
    )  # an enrolment made elsewhere logged this session out (apps.accounts.session_second_factor)
    wrong = client.post("/api/v1/withdrawals/", {**body, "otp": "000000x"}, content_type="application/json")
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "invalid_otp"
    assert not Withdrawal.objects.exists()


def test_the_wallet_page_lists_the_book_and_adds_and_deletes(usdt, user, client):
    client.force_login(user)
    address = new_address()

    added = client.post("/wallet/addresses/", {"book-asset": "USDT", "book-address": address, "book-label": "mine"})

    assert added.status_code == 302
    entry = WithdrawalAddress.objects.get(user=user)
    page = client.get("/wallet/").content.decode()
    row = page.split(f'<tr data-withdrawal-address="{entry.id}">')[1].split("</tr>")[0]
    assert address in row and "mine" in row and 'data-status="pending_confirmation"' in row
    refused = client.post("/wallet/addresses/", {"book-asset": "USDT", "book-address": "sim1"})
    assert (refused.status_code, refused["Location"]) == (302, "/wallet/")  # post/redirect/get
    shown = client.get("/wallet/")
    assert "address" in shown.context["address_form"].errors
    assert shown.context["address_form"]["address"].value() == "sim1"
    assert not client.get("/wallet/").context["address_form"].is_bound  # shown once

    assert client.post(f"/wallet/addresses/{entry.id}/delete/").status_code == 302
    assert not WithdrawalAddress.objects.exists()


def test_the_e_mailed_link_opens_a_page_and_confirms_on_its_button(usdt, user, client):
    entry = withdrawal_address_add(user_id=user.id, asset_code="USDT", address=new_address())
    url = f"/wallet/addresses/confirm/{token_for(entry)}/"

    page = client.get(url)
    assert page.status_code == 200 and "<button" in page.content.decode()
    assert WithdrawalAddress.objects.get(pk=entry.pk).confirmed_at is None  # a mail scanner's GET confirms nothing

    confirmed = client.post(url)
    assert confirmed.status_code == 200 and "can be used from" in confirmed.content.decode()
    assert client.post(url).status_code == 409
    assert client.post("/wallet/addresses/confirm/nonsense/").status_code == 400


def test_an_unknown_asset_reads_the_same_in_the_address_book_and_the_deposit_address(db, api_as, user):
    client = api_as(user, "read", "withdraw")

    booked = client.post(BOOK, {"asset": "btc", "address": new_address()}, format="json")
    deposit = client.get("/api/v1/deposit-address/btc/")

    assert (booked.status_code, deposit.status_code) == (400, 404)
    assert booked.json()["error"] == {
        "code": "invalid_request",
        "message": "Unknown asset btc.",
        "fields": {"asset": "Unknown asset."},
    }
    assert deposit.json()["error"] == {
        "code": "not_found",
        "message": "Unknown asset btc.",
        "fields": {"asset": "Unknown asset."},
    }
