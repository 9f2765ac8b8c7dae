"""The wallet page: deposit addresses, the withdraw form with its fee, deposit and withdrawal history, cancel."""

from decimal import Decimal

import pytest
from django.test import Client

from apps.accounts.tests.otp import enrol, user_code
from apps.ledger.services import user_accounts
from apps.ledger.tests.factories import AssetFactory, UserFactory
from apps.wallets.custody import simnet
from apps.wallets.models import DepositAddress, Withdrawal, WithdrawalAddress, WithdrawalStatus
from apps.wallets.services import withdrawal_request
from apps.wallets.tests.factories import book_address, deposit_through_custody
from exchange.tests.concurrency import run_concurrently
from exchange.tests.html import amt

DESTINATION = simnet.new_address()


def balances(user, asset) -> tuple[Decimal, Decimal]:
    available, held = user_accounts(user.id, asset)
    return available.balance, held.balance


@pytest.fixture
def holder(usdt, btc):
    """A user who deposited 500 USDT through the simulated custody, with a second factor and DESTINATION in their
    address book."""
    holder = UserFactory()
    deposit_through_custody(holder, usdt, "500")
    book_address(holder, usdt, DESTINATION)
    enrol(holder)
    return holder


def withdraw_form(**overrides) -> dict:
    return {"asset": "USDT", "amount": "50", "address": DESTINATION, "request_key": "key-1", **overrides}


def post_withdraw(client, user, form: dict, **kwargs):
    """Send the withdraw form with a current code from the user's authenticator (``kwargs`` go to the client)."""
    return client.post("/wallet/withdraw/", {**form, "otp": user_code(user)}, **kwargs)


def test_deposit_address_is_shown_once_asked_for(usdt, btc, user, client):
    client.force_login(user)
    assert "Show address" in client.get("/wallet/").content.decode()

    partial = client.post("/wallet/deposit-address/", {"asset": "BTC"}, HTTP_HX_REQUEST="true").content.decode()

    address = DepositAddress.objects.get(user=user, asset=btc).address
    assert partial.strip() == f'<code class="address" data-asset="BTC">{address}</code>'
    assert client.post("/wallet/deposit-address/", {"asset": "BTC"}).status_code == 302  # without htmx
    assert DepositAddress.objects.filter(user=user).count() == 1
    assert address in client.get("/wallet/").content.decode()


def test_deposit_address_of_an_unknown_asset_is_404(usdt, user, client):
    client.force_login(user)
    assert client.post("/wallet/deposit-address/", {"asset": "DOGE"}).status_code == 404
    assert client.post("/wallet/deposit-address/", {"asset": "US\x00DT"}).status_code == 404
    assert not DepositAddress.objects.exists()


def test_deposits_are_listed(holder, client):
    client.force_login(holder)
    page = client.get("/wallet/").content.decode().split('id="deposits"')[1]
    assert f'<td class="num">{amt("500")}</td>' in page
    assert "Credited" in page


def test_withdrawing_from_the_form(holder, usdt, client):
    client.force_login(holder)

    response = post_withdraw(client, holder, withdraw_form())

    assert response.status_code == 302
    withdrawal = Withdrawal.objects.get(user=holder)
    assert (withdrawal.amount, withdrawal.fee, withdrawal.status) == (Decimal(50), Decimal(1), "approved")
    assert balances(holder, usdt) == (Decimal(449), Decimal(51))
    page = client.get("/wallet/").content.decode()
    assert f"Withdrawal #{withdrawal.id} of 50 USDT: approved." in page
    assert f'<tr data-withdrawal="{withdrawal.id}">' in page


def test_a_double_submit_of_the_withdraw_form_is_one_withdrawal_and_says_so(holder, usdt, client):
    """Break-it review: the second post (the same form, its code spent by the first) said "This code was already
    used" of a withdrawal that had gone through; it now answers that withdrawal."""
    client.force_login(holder)
    form = {**withdraw_form(request_key="twice"), "otp": user_code(holder)}  # the same form, its code with it
    client.post("/wallet/withdraw/", form)
    client.get("/wallet/")  # the first answer's message, shown
    client.post("/wallet/withdraw/", form)

    withdrawal = Withdrawal.objects.get()
    assert balances(holder, usdt) == (Decimal(449), Decimal(51))
    page = client.get("/wallet/").content.decode()
    assert f"Withdrawal #{withdrawal.id} of 50 USDT: approved." in page and "already used" not in page


@pytest.mark.parametrize(
    ("form", "field"),
    [
        (withdraw_form(amount="NaN"), "amount"),
        (withdraw_form(amount="-5"), "amount"),
        (withdraw_form(amount="0"), "amount"),
        (withdraw_form(amount="1.0000001"), "amount"),
        (withdraw_form(amount="1E+2"), "amount"),
        (withdraw_form(amount=""), "amount"),
        (withdraw_form(amount="0.5"), "amount"),  # below the minimum
        (withdraw_form(address="sim1" + "0" * 40), "address"),
        (withdraw_form(address=""), "address"),
        (withdraw_form(asset="DOGE"), "asset"),
    ],
)
def test_withdraw_form_errors_are_shown_next_to_the_field_and_nothing_is_written(holder, usdt, client, form, field):
    client.force_login(holder)

    response = post_withdraw(client, holder, form, follow=True)

    assert response.redirect_chain == [("/wallet/", 302)]  # post/redirect/get: a reload sends nothing
    assert field in response.context["form"].errors
    assert f'id="id_{field}_error"' in response.content.decode()
    assert not Withdrawal.objects.exists()
    assert balances(holder, usdt) == (Decimal(500), Decimal(0))


def test_insufficient_funds_is_shown_on_the_withdraw_form(holder, client):
    client.force_login(holder)
    response = post_withdraw(client, holder, withdraw_form(amount="500"), follow=True)  # plus the fee of 1
    assert response.redirect_chain == [("/wallet/", 302)]
    errors = response.context["form"].errors["amount"]
    assert len(errors) == 1 and "insufficient" in errors[0].lower()
    assert not Withdrawal.objects.exists()


def test_the_fee_line_shows_the_fee_and_what_leaves_the_balance(usdt, user, client):
    client.force_login(user)

    line = client.get("/wallet/withdraw/fee/", {"asset": "USDT", "amount": "50"}).content.decode()

    assert f"Fee <strong>{amt('1')} USDT</strong>" in line
    assert f"<strong>{amt('51')} USDT</strong>" in line
    assert "51" not in client.get("/wallet/withdraw/fee/", {"asset": "USDT", "amount": "abc"}).content.decode()
    assert client.get("/wallet/withdraw/fee/", {"asset": "DOGE"}).status_code == 404
    assert f"Fee <strong>{amt('1')} USDT</strong>" in client.get("/wallet/").content.decode()


def test_a_pending_withdrawal_can_be_cancelled_from_the_page(holder, usdt, client):
    pending = withdrawal_request(user_id=holder.id, asset_code="USDT", amount="150", address=DESTINATION)
    approved = withdrawal_request(user_id=holder.id, asset_code="USDT", amount="10", address=DESTINATION)
    assert (pending.status, approved.status) == (WithdrawalStatus.AWAITING_APPROVAL, WithdrawalStatus.APPROVED)
    client.force_login(holder)
    page = client.get("/wallet/").content.decode()
    assert f'action="/wallet/withdrawals/{pending.id}/cancel/"' in page
    assert f'action="/wallet/withdrawals/{approved.id}/cancel/"' not in page

    client.post(f"/wallet/withdrawals/{pending.id}/cancel/")

    assert Withdrawal.objects.get(id=pending.id).status == WithdrawalStatus.CANCELLED
    assert balances(holder, usdt) == (Decimal(489), Decimal(11))
    refused = client.post(f"/wallet/withdrawals/{approved.id}/cancel/", follow=True).content.decode()
    assert "cannot become cancelled" in refused
    assert Withdrawal.objects.get(id=approved.id).status == WithdrawalStatus.APPROVED
    again = client.post(f"/wallet/withdrawals/{pending.id}/cancel/", follow=True)
    assert [str(message) for message in again.context["messages"]] == [
        f"Withdrawal #{pending.id} is already cancelled."
    ]


def test_a_trader_cannot_cancel_someone_elses_withdrawal(holder, client):
    pending = withdrawal_request(user_id=holder.id, asset_code="USDT", amount="150", address=DESTINATION)
    client.force_login(UserFactory())
    client.post(f"/wallet/withdrawals/{pending.id}/cancel/")
    assert Withdrawal.objects.get(id=pending.id).status == WithdrawalStatus.AWAITING_APPROVAL


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/wallet/withdraw/fee/?asset=USDT"),
        ("post", "/wallet/withdraw/"),
        ("post", "/wallet/deposit-address/"),
        ("post", "/wallet/withdrawals/1/cancel/"),
    ],
)
def test_wallet_actions_need_a_log_in(usdt, client, method, url):
    response = getattr(client, method)(url)
    assert response.status_code == 302 and response.url.startswith("/accounts/login/")


def test_a_huge_amount_of_an_18_decimal_asset_is_shown_as_an_error(user, client):
    eth = AssetFactory(
        code="ETH", name="Ether", decimals=18, min_withdrawal=Decimal("0.01"), withdrawal_daily_limit=Decimal(1000)
    )
    book_address(user, eth, DESTINATION)
    enrol(user)
    client.force_login(user)

    response = post_withdraw(client, user, withdraw_form(asset="ETH", amount="12345678901.5"), follow=True)

    assert response.redirect_chain == [("/wallet/", 302)]
    assert "amount" in response.context["form"].errors
    assert client.get("/wallet/withdraw/fee/", {"asset": "ETH", "amount": "12345678901.5"}).status_code == 200


def test_a_changed_resubmit_of_a_sent_withdraw_form_requests_nothing_and_gets_a_fresh_key(holder, client):
    client.force_login(holder)
    post_withdraw(client, holder, withdraw_form(request_key="sent"))

    response = post_withdraw(client, holder, withdraw_form(request_key="sent", amount="60"), follow=True)

    assert response.redirect_chain == [("/wallet/", 302)]
    form = response.context["form"]
    assert "already requested from this form" in form.non_field_errors()[0]
    assert Withdrawal.objects.count() == 1
    fresh = form["request_key"].value()
    assert fresh != "sent"
    post_withdraw(client, holder, withdraw_form(request_key=fresh, amount="60"))
    assert sorted(Withdrawal.objects.values_list("amount", flat=True)) == [Decimal(50), Decimal(60)]


def test_without_a_second_factor_the_withdraw_form_asks_to_set_one_up_and_withdraws_nothing(usdt, client):
    trader = UserFactory()
    deposit_through_custody(trader, usdt, "500")
    book_address(trader, usdt, DESTINATION)
    client.force_login(trader)
    assert "set one up" in client.get("/wallet/").content.decode()

    response = client.post("/wallet/withdraw/", withdraw_form(), follow=True)

    assert response.redirect_chain == [("/wallet/", 302)]
    assert "second factor" in response.context["form"].errors["otp"][0]
    assert not Withdrawal.objects.exists()


def test_a_wrong_code_on_the_withdraw_form_withdraws_nothing(holder, usdt, client):
    client.force_login(holder)
    response = client.post("/wallet/withdraw/", {**withdraw_form(), "otp": "000000x"}, follow=True)
    assert response.redirect_chain == [("/wallet/", 302)] and "otp" in response.context["form"].errors
    assert not Withdrawal.objects.exists()
    assert balances(holder, usdt) == (Decimal(500), Decimal(0))


def test_a_withdraw_form_refused_for_a_typo_does_not_use_up_the_code(holder, usdt, client):
    """Break-it review: amount -1 with a valid code said "Must be positive.", and the corrected form with the same
    code then said the code was already used."""
    client.force_login(holder)
    code = user_code(holder)

    refused = client.post("/wallet/withdraw/", {**withdraw_form(amount="-1"), "otp": code}, follow=True)
    corrected = client.post("/wallet/withdraw/", {**withdraw_form(amount="50"), "otp": code}, follow=True)

    assert refused.context["form"].errors == {"amount": ["Must be positive."]}
    assert "form" not in corrected.context or not corrected.context["form"].errors
    assert list(Withdrawal.objects.values_list("amount", flat=True)) == [Decimal(50)]


def test_a_withdrawal_to_an_address_not_in_the_book_is_refused_on_the_form(holder, client):
    client.force_login(holder)
    response = post_withdraw(client, holder, withdraw_form(address=simnet.new_address()), follow=True)
    assert response.redirect_chain == [("/wallet/", 302)]
    assert "address book" in response.context["form"].errors["address"][0]
    assert not Withdrawal.objects.exists()


def test_a_refused_withdrawal_is_shown_once_and_a_reload_shows_a_fresh_form(holder, client):
    client.force_login(holder)
    post_withdraw(client, holder, withdraw_form(amount="1.0000001"))

    shown = client.get("/wallet/")
    reloaded = client.get("/wallet/")

    assert shown.context["form"]["amount"].value() == "1.0000001" and "amount" in shown.context["form"].errors
    assert not reloaded.context["form"].is_bound
    assert not Withdrawal.objects.exists()


def test_a_withdrawal_over_the_balance_says_insufficient_funds_not_daily_limit(holder, usdt, client):
    """Regression: the daily limit was judged first, so a trader short of funds read "above the daily limit"."""
    usdt.withdrawal_daily_limit = Decimal(100)
    usdt.save(update_fields=["withdrawal_daily_limit"])
    client.force_login(holder)  # holds 500 USDT

    response = post_withdraw(client, holder, withdraw_form(amount="600"), follow=True)

    (error,) = response.context["form"].errors["amount"]
    assert error == "Insufficient funds: 500.000000 USDT available, 601.000000 needed with the fee."
    assert not Withdrawal.objects.exists()


def test_deleting_someone_elses_address_book_entry_says_no_such_address(holder, usdt, client):
    entry = book_address(holder, usdt, simnet.new_address())
    intruder = UserFactory()
    client.force_login(intruder)

    response = client.post(f"/wallet/addresses/{entry.id}/delete/", follow=True)

    assert response.redirect_chain == [("/wallet/", 302)]
    assert [str(message) for message in response.context["messages"]] == ["No such address in your address book."]
    assert "No such address in your address book." in response.content.decode()
    assert WithdrawalAddress.objects.filter(id=entry.id).exists()


@pytest.mark.django_db(transaction=True)
def test_a_double_click_sending_the_form_twice_at_once_answers_one_withdrawal_twice(holder, usdt):
    """Break-it review: two posts of one form at the same instant (a double click) made one withdrawal, but the second
    answer said "This code was already used": it checked for the form's withdrawal before the first had committed.
    Real threads, each with its own connection and its own session of the user."""
    form = {**withdraw_form(request_key="double"), "otp": user_code(holder)}
    clients = [Client(), Client()]
    for client in clients:
        client.force_login(holder)

    def post(client: Client) -> str:
        client.post("/wallet/withdraw/", form)
        return client.get("/wallet/").content.decode()

    pages = run_concurrently(*(lambda client=client: post(client) for client in clients))

    withdrawal = Withdrawal.objects.get()
    assert balances(holder, usdt) == (Decimal(449), Decimal(51))
    assert len(pages) == 2
    assert all(f"Withdrawal #{withdrawal.id} of 50 USDT: approved." in page for page in pages)
    assert not any("already used" in page for page in pages)
