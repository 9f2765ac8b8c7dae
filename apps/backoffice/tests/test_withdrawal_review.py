"""The approval page an approver decides on: the destination address, legible, with its risk signals beside it;
a rejection's reason shown to the customer."""

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.utils import timezone

from apps.backoffice.selectors import withdrawal_risk_signals
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.services import market_create, order_place
from apps.wallets.custody.simnet import new_address
from apps.wallets.models import Withdrawal
from apps.wallets.services import (
    deposit_address_get_or_create,
    withdrawal_cancel,
    withdrawal_complete,
    withdrawal_request,
    withdrawal_submit,
)
from apps.wallets.tests.factories import book_address, deposit_through_custody

D = Decimal


@pytest.fixture
def usdt_limits(usdt):
    """Withdrawals of USDT above 100 await approval."""
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=D(100), withdrawal_daily_limit=D(10_000))
    usdt.refresh_from_db()
    return usdt


@pytest.fixture
def depositor(usdt_limits):
    """A customer who deposited 1,000 USDT and never traded."""
    user = UserFactory(username="dan")
    deposit_through_custody(user, usdt_limits, "1000")
    return user


def request(user, amount="150", address=None) -> Withdrawal:
    address = book_address(user, "USDT", address or new_address()).address
    return withdrawal_request(user_id=user.id, asset_code="USDT", amount=amount, address=address)


def test_the_address_stands_out_and_the_signals_of_a_new_customer_are_flagged(client, approver, depositor, admin_login):
    withdrawal = request(depositor)
    admin_login(approver)

    html = client.get(f"/admin/backoffice/withdrawalapproval/{withdrawal.id}/change/").content.decode()

    assert f'<div id="destination-address" class="destination-address">{withdrawal.address}</div>' in html
    assert "css/backoffice.css" in html
    signals = html[html.index('id="risk-signals"') :]
    assert "⚠ first use by this customer" in signals
    assert "not one of our customers' addresses" in signals
    assert "⚠ 1000.000000 USDT" in signals and "never traded" in signals
    assert signals.count('class="warning"') == 3  # new account, first use, untraded deposits


def test_the_stylesheet_sets_a_large_monospaced_black_on_white_address():
    css = Path(finders.find("css/backoffice.css")).read_text()
    rule = css[css.index(".destination-address {") :]
    rule = rule[: rule.index("}")]
    assert "monospace" in rule and "font-size: 1.6em" in rule and "color: #000" in rule and "background: #fff" in rule


def test_an_old_account_withdrawing_again_to_a_known_address_after_trading_raises_no_flag(depositor, usdt_limits, btc):
    address = new_address()
    first = request(depositor, amount="50", address=address)  # auto-approved
    withdrawal_submit(withdrawal_id=first.id)
    withdrawal_complete(withdrawal_id=first.id, txid="a" * 64)
    Withdrawal.objects.filter(id=first.id).update(created_at=timezone.now() - timedelta(days=2))
    market_create(
        base=btc, quote=usdt_limits, tick_size=D("0.01"), step_size=D("0.0001"), min_qty=D("0.0001"), max_qty=D("100")
    )
    seller = UserFactory()
    fund(seller, btc, "1")
    order_place(user_id=seller.id, market="BTC-USDT", side="sell", price="1000", qty="0.1")
    order_place(user_id=depositor.id, market="BTC-USDT", side="buy", price="1000", qty="0.1")
    type(depositor).objects.filter(id=depositor.id).update(date_joined=timezone.now() - timedelta(days=400))

    signals = withdrawal_risk_signals(
        Withdrawal.objects.select_related("user", "asset").get(id=request(depositor, address=address).id)
    )

    assert not signals.new_account_warning and not signals.first_use and not signals.address_owner_warning
    assert (signals.recent_count, signals.untraded_deposits, signals.untraded_warning) == (0, [], False)
    assert signals.last_fill_at is not None


def test_withdrawals_of_the_last_24_hours_count_without_cancelled_ones(depositor):
    request(depositor, amount="20")
    request(depositor, amount="30")
    cancelled = request(depositor, amount="120")
    withdrawal_cancel(withdrawal_id=cancelled.id, user_id=depositor.id)

    signals = withdrawal_risk_signals(request(depositor))

    assert signals.recent_count == 2
    assert [(t.asset, t.amount) for t in signals.recent_totals] == [("USDT", D("50"))]  # amount + fee (0)


def test_deposits_after_the_last_fill_count_as_untraded(depositor, usdt_limits, btc):
    market_create(
        base=btc, quote=usdt_limits, tick_size=D("0.01"), step_size=D("0.0001"), min_qty=D("0.0001"), max_qty=D("100")
    )
    seller = UserFactory()
    fund(seller, btc, "1")
    order_place(user_id=seller.id, market="BTC-USDT", side="sell", price="1000", qty="0.1")
    order_place(user_id=depositor.id, market="BTC-USDT", side="buy", price="1000", qty="0.1")
    deposit_through_custody(depositor, usdt_limits, "250")

    signals = withdrawal_risk_signals(request(depositor))

    assert [(t.asset, t.amount) for t in signals.untraded_deposits] == [("USDT", D("250"))]
    assert signals.untraded_warning


def test_an_address_of_another_customer_is_flagged_with_their_name(depositor, usdt_limits):
    other = UserFactory(username="eve")
    shared = new_address()
    deposit_through_custody(other, usdt_limits, "500")
    request(other, amount="10", address=shared)
    eves_deposit_address = deposit_address_get_or_create(user_id=other.id, asset=usdt_limits).address

    to_shared = withdrawal_risk_signals(request(depositor, address=shared))
    # Judged before it is requested: a withdrawal to a deposit address of ours settles inside the exchange.
    to_eves = withdrawal_risk_signals(
        Withdrawal(user=depositor, asset=usdt_limits, network=usdt_limits.network, address=eves_deposit_address)
    )

    assert (to_shared.other_customers, to_shared.deposit_address_of) == (["eve"], None)
    assert (to_eves.deposit_address_of, to_eves.address_owner_warning) == ("eve", True)


def test_a_rejection_needs_a_reason_which_the_customer_sees(client, approver, depositor, admin_login):
    withdrawal = request(depositor)
    admin_login(approver)
    client.post(f"/admin/backoffice/withdrawalapproval/{withdrawal.id}/decide/", {"decision": "reject", "reason": ""})
    assert Withdrawal.objects.get(id=withdrawal.id).status == "awaiting_approval"

    client.post(
        f"/admin/backoffice/withdrawalapproval/{withdrawal.id}/decide/",
        {"decision": "reject", "reason": "destination on a sanctions list"},
    )

    customer = Client()
    customer.force_login(depositor)
    wallet = customer.get("/wallet/").content.decode()
    assert '<div class="reject-reason">Reason: destination on a sanctions list</div>' in wallet
    api = customer.get("/api/v1/withdrawals/").json()
    assert [(w["id"], w["status"], w["reject_reason"]) for w in api] == [
        (withdrawal.id, "rejected", "destination on a sanctions list")
    ]
