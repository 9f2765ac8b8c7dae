"""Withdrawals above a per-asset threshold (WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE) wait for an e-mail link:
requested -> awaiting_confirmation -> approved | awaiting_approval; cancelled by the user, or expired."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group

from apps.accounts.errors import WithdrawalsBlocked
from apps.accounts.restrictions import account_withdrawals_block
from apps.core.errors import InvalidState
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import user_accounts
from apps.ledger.tests.factories import UserFactory
from apps.wallets.address_book import AddressNotAllowed, withdrawal_address_delete
from apps.wallets.custody.simnet import new_address
from apps.wallets.links import InvalidLink, link_token_make
from apps.wallets.models import Withdrawal, WithdrawalAddress, WithdrawalStatus
from apps.wallets.selectors import withdrawals_to_decide
from apps.wallets.services import (
    withdrawal_cancel,
    withdrawal_confirm,
    withdrawal_request,
    withdrawals_expire_unconfirmed,
)

from .factories import book_address, deposit_through_custody

pytestmark = pytest.mark.django_db

DESTINATION_ADDRESS = new_address()


@pytest.fixture
def holder(usdt, user, settings):
    """500 USDT deposited; withdrawals above 100 USDT need an e-mail confirmation (auto-approved up to 1,000)."""
    settings.WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE = {"USDT": Decimal(100)}
    deposit_through_custody(user, usdt, "500")
    return user


def request(user, amount: str) -> Withdrawal:
    address = book_address(user, "USDT", DESTINATION_ADDRESS).address
    return withdrawal_request(user_id=user.id, asset_code="USDT", amount=amount, address=address)


def token(withdrawal: Withdrawal) -> str:
    return link_token_make(purpose="withdrawal", object_id=withdrawal.pk)


def balances(user, asset) -> tuple[Decimal, Decimal]:
    available, held = user_accounts(user.id, asset)
    return available.balance, held.balance


def test_above_the_threshold_the_hold_is_taken_and_the_withdrawal_waits_for_its_link(holder, usdt):
    withdrawal = request(holder, "150")

    assert withdrawal.status == WithdrawalStatus.AWAITING_CONFIRMATION
    assert balances(holder, usdt) == (Decimal(350), Decimal(150))
    assert not withdrawals_to_decide().exists()

    confirmed = withdrawal_confirm(token=token(withdrawal))

    assert confirmed.status == WithdrawalStatus.APPROVED  # within the auto-approval limit
    with pytest.raises(InvalidState):
        withdrawal_confirm(token=token(withdrawal))  # the link works once


def test_at_the_threshold_no_confirmation_is_needed(holder):
    assert request(holder, "100").status == WithdrawalStatus.APPROVED


def test_a_confirmed_withdrawal_above_the_auto_approval_limit_awaits_an_operator(holder, usdt):
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=Decimal(120))
    withdrawal = request(holder, "150")

    assert withdrawal_confirm(token=token(withdrawal)).status == WithdrawalStatus.AWAITING_APPROVAL
    assert list(withdrawals_to_decide()) == [withdrawal]


def test_an_unconfirmed_withdrawal_can_be_cancelled_and_its_link_then_does_nothing(holder, usdt):
    withdrawal = request(holder, "150")

    cancelled = withdrawal_cancel(withdrawal_id=withdrawal.pk, user_id=holder.id)

    assert cancelled.status == WithdrawalStatus.CANCELLED
    assert balances(holder, usdt) == (Decimal(500), Decimal(0))
    with pytest.raises(InvalidState):
        withdrawal_confirm(token=token(withdrawal))
    assert reconcile().ok


def test_an_unconfirmed_withdrawal_expires_and_its_hold_is_released_once(holder, usdt, settings):
    withdrawal = request(holder, "150")
    fresh = request(holder, "120")
    Withdrawal.objects.filter(pk=withdrawal.pk).update(created_at=withdrawal.created_at - timedelta(hours=2))

    assert withdrawals_expire_unconfirmed(older_than=timedelta(hours=1)) == [withdrawal.pk]
    assert withdrawals_expire_unconfirmed(older_than=timedelta(hours=1)) == []

    withdrawal.refresh_from_db()
    assert (withdrawal.status, withdrawal.hold_remaining) == (WithdrawalStatus.EXPIRED, Decimal(0))
    assert Withdrawal.objects.get(pk=fresh.pk).status == WithdrawalStatus.AWAITING_CONFIRMATION
    assert balances(holder, usdt) == (Decimal(380), Decimal(120))
    with pytest.raises(InvalidState):
        withdrawal_confirm(token=token(withdrawal))
    settings.WITHDRAWAL_CONFIRMATION_MAX_AGE = -1  # every link is too old
    with pytest.raises(InvalidLink):
        withdrawal_confirm(token=token(fresh))
    assert reconcile().ok


def test_expired_withdrawals_do_not_count_against_the_daily_limit(holder, usdt):
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_daily_limit=Decimal(200))
    withdrawal = request(holder, "150")
    withdrawals_expire_unconfirmed(older_than=timedelta(0))
    assert Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.EXPIRED

    assert request(holder, "150").status == WithdrawalStatus.AWAITING_CONFIRMATION


def test_the_link_page_confirms_on_its_button(holder, client):
    withdrawal = request(holder, "150")
    url = f"/wallet/withdrawals/confirm/{token(withdrawal)}/"

    assert client.get(url).status_code == 200
    assert Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.AWAITING_CONFIRMATION
    page = client.post(url).content.decode()

    assert f"withdrawal #{withdrawal.id} is now approved" in page
    assert client.post(url).status_code == 409


@pytest.mark.parametrize("page", ["wallet/withdrawals", "wallet/addresses", "email"])
def test_a_link_that_cannot_confirm_anything_says_so_on_opening_not_with_a_confirm_button(holder, client, page):
    """A bad link opened (GET) showed the confirm button; only its POST said it was not valid."""
    withdrawal = request(holder, "150")
    other_purpose = link_token_make(purpose="another-purpose", object_id=withdrawal.id)

    for bad in ["not-a-token", token(withdrawal)[:-2] + "xx", other_purpose]:
        opened = client.get(f"/{page}/confirm/{bad}/")

        assert opened.status_code == 400
        assert "This confirmation link is not valid or has expired." in opened.content.decode()
        assert "<form" not in opened.content.decode().split('id="confirm"')[1]
    assert Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.AWAITING_CONFIRMATION


def test_the_wallet_page_offers_to_cancel_an_unconfirmed_withdrawal(holder, client):
    withdrawal = request(holder, "150")
    client.force_login(holder)
    page = client.get("/wallet/").content.decode()
    assert f'action="/wallet/withdrawals/{withdrawal.id}/cancel/"' in page
    assert "Waiting for e-mail confirmation" in page


def test_the_beat_task_expires_what_was_not_confirmed_in_time(holder, usdt, settings):
    from apps.wallets.tasks import withdrawals_expire_sweep

    withdrawal = request(holder, "150")
    settings.WITHDRAWAL_CONFIRMATION_MAX_AGE = 3600
    assert withdrawals_expire_sweep() == 0
    Withdrawal.objects.filter(pk=withdrawal.pk).update(created_at=withdrawal.created_at - timedelta(seconds=3601))

    assert withdrawals_expire_sweep() == 1
    assert Withdrawal.objects.get(pk=withdrawal.pk).status == WithdrawalStatus.EXPIRED
    assert balances(holder, usdt) == (Decimal(500), Decimal(0))


@pytest.mark.django_db(transaction=True)
def test_confirming_cancelling_and_expiring_at_once_end_one_way_and_release_at_most_once(usdt, settings):
    from apps.ledger.tests.factories import UserFactory
    from apps.ledger.tests.threads import run_concurrently

    settings.WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE = {"USDT": Decimal(100)}
    user = UserFactory()
    deposit_through_custody(user, usdt, "500")
    withdrawal = request(user, "150")

    results = run_concurrently(
        [
            lambda: withdrawal_confirm(token=token(withdrawal)),
            lambda: withdrawal_cancel(withdrawal_id=withdrawal.pk, user_id=user.id),
            lambda: withdrawals_expire_unconfirmed(older_than=timedelta(0)),
        ]
    )

    final = Withdrawal.objects.get(pk=withdrawal.pk)
    confirmed, cancelled, expired = results
    outcomes = [
        not isinstance(confirmed, Exception),
        not isinstance(cancelled, Exception),
        expired == [withdrawal.pk],
    ]
    assert outcomes.count(True) == 1, results
    assert all(isinstance(r, InvalidState) for r in (confirmed, cancelled) if isinstance(r, Exception)), results
    if final.status == WithdrawalStatus.APPROVED:
        assert balances(user, usdt) == (Decimal(350), Decimal(150))
    else:
        assert final.status in (WithdrawalStatus.CANCELLED, WithdrawalStatus.EXPIRED)
        assert balances(user, usdt) == (Decimal(500), Decimal(0))
    assert reconcile().ok


def test_the_threshold_setting_takes_amounts_and_refuses_anything_else():
    from django.core.exceptions import ImproperlyConfigured

    from exchange.settings.environment import amounts_by_asset

    assert amounts_by_asset({"BTC": "0.5", "USDT": "10000"}, name="X") == {
        "BTC": Decimal("0.5"),
        "USDT": Decimal(10000),
    }
    for bad in ("abc", "-1", "NaN", "Infinity", ""):
        with pytest.raises(ImproperlyConfigured, match="X: BTC="):
            amounts_by_asset({"BTC": bad}, name="X")


# A link is opened up to WITHDRAWAL_CONFIRMATION_MAX_AGE after the request: what the request checked is checked again.


def _still_waiting(withdrawal: Withdrawal, holder, usdt) -> None:
    withdrawal.refresh_from_db()
    assert withdrawal.status == WithdrawalStatus.AWAITING_CONFIRMATION
    assert balances(holder, usdt) == (Decimal(350), Decimal(150))  # the hold stays until it is cancelled or expires


def test_a_link_confirms_nothing_while_an_operator_blocks_the_accounts_withdrawals(holder, usdt):
    operator = UserFactory(is_staff=True)
    operator.groups.add(Group.objects.get(name="operators"))
    withdrawal = request(holder, "150")
    account_withdrawals_block(user_id=holder.id, operator_id=operator.id, blocked=True, reason="chargeback")

    with pytest.raises(WithdrawalsBlocked):
        withdrawal_confirm(token=token(withdrawal))

    _still_waiting(withdrawal, holder, usdt)


def test_a_link_confirms_nothing_once_the_address_left_the_address_book(holder, usdt):
    withdrawal = request(holder, "150")
    entry = WithdrawalAddress.objects.get(user=holder, address=withdrawal.address)
    withdrawal_address_delete(user_id=holder.id, entry_id=entry.id)

    with pytest.raises(AddressNotAllowed):
        withdrawal_confirm(token=token(withdrawal))

    _still_waiting(withdrawal, holder, usdt)
