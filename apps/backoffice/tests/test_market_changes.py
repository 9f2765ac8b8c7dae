"""A market's filters (quantity limits, minimum notional, market orders' price band) change by maker-checker: one
operator drafts with a reason, another approver with the second factor applies (break-it review: one operator
emptied the price band, or raised the minimum quantity, alone and without a reason)."""

from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.test import Client

from apps.audit.models import AuditLogEntry
from apps.backoffice.models import ChangeStatus, MarketChange
from apps.backoffice.services import market_change_approve, market_change_draft, market_change_reject
from apps.backoffice.tests.logins import login_with_second_factor
from apps.core.errors import DomainError, InvalidState, PermissionDenied
from apps.ledger.forms import PLAIN_AMOUNT_MESSAGE
from apps.orders.models import Market

D = Decimal
ADD = "/admin/backoffice/marketchange/add/"
FILTERS = ("min_qty", "max_qty", "min_notional", "market_order_price_band")


def filters(market: Market) -> tuple:
    market.refresh_from_db()
    return tuple(getattr(market, name) for name in FILTERS)


def draft_form(market: Market, **fields) -> dict:
    return {
        "market": market.id,
        "min_qty": "0.0001",
        "max_qty": "1000",
        "min_notional": "1",
        "market_order_price_band": "",
        "memo": "ticket 7",
        **fields,
    }


def decide(client, change_id, decision, note=""):
    return client.post(f"/admin/backoffice/marketchange/{change_id}/decide/", {"decision": decision, "note": note})


def draft(operator, market, **values) -> MarketChange:
    fields = {"min_qty": "0.0001", "max_qty": "1000", "min_notional": "1", "market_order_price_band": None} | values
    return market_change_draft(author_id=operator.id, market_id=market.id, memo="ticket 7", **fields)


def test_an_operator_alone_cannot_change_a_markets_filters(client, operator, btc_usdt):
    """The regression: the market's form saved new filters (an emptied price band among them) at once."""
    btc_usdt.market_order_price_band = D("5")
    btc_usdt.save(update_fields=["market_order_price_band"])
    client.force_login(operator)
    before = filters(btc_usdt)

    page = client.get(f"/admin/orders/market/{btc_usdt.id}/change/").content.decode()
    direct = client.post(
        f"/admin/orders/market/{btc_usdt.id}/change/",
        {"min_qty": "0.0001", "max_qty": "1000", "min_notional": "1", "market_order_price_band": ""},
    )
    assert direct.status_code == 403
    assert f'href="{ADD}?market={btc_usdt.id}"' in page and 'name="_save"' not in page

    drafted = client.post(ADD, draft_form(btc_usdt, min_qty="0.5"))
    change = MarketChange.objects.get()
    assert drafted.url == f"/admin/backoffice/marketchange/{change.id}/change/"
    assert decide(client, change.id, "approve").status_code == 403  # no approver's permission
    assert filters(btc_usdt) == before
    assert MarketChange.objects.get().status == ChangeStatus.DRAFT


def test_another_approver_with_the_second_factor_applies_the_change(client, operator, approver, btc_usdt):
    btc_usdt.market_order_price_band = D("5")
    btc_usdt.save(update_fields=["market_order_price_band"])
    change = draft(operator, btc_usdt, min_qty="0.01", max_qty="50", min_notional="10")
    unverified = Client()
    unverified.force_login(approver)
    refused = decide(unverified, change.id, "approve")
    assert refused.status_code == 302 and refused.url.startswith("/admin/second-factor/")
    assert filters(btc_usdt) == (D("0.0001"), D("1000"), D("1"), D("5"))

    login_with_second_factor(client, approver)
    page = client.get(f"/admin/backoffice/marketchange/{change.id}/change/").content.decode()
    assert "Approve and apply" in page and "none (no price protection)" in page and "ticket 7" in page
    decide(client, change.id, "approve")

    assert filters(btc_usdt) == (D("0.01"), D("50"), D("10"), None)
    change.refresh_from_db()
    assert (change.status, change.decided_by) == (ChangeStatus.APPROVED, approver)
    log = AuditLogEntry.objects.exclude(action__in=("login", "second_factor.enrol")).order_by("id")
    assert [(row.action, row.actor_id, row.object_type) for row in log] == [
        ("market_change.draft", operator.id, "backoffice.marketchange"),
        ("market_change.approve", approver.id, "backoffice.marketchange"),
        ("market.update", approver.id, "orders.market"),
    ]
    update = log.last()
    assert (update.object_id, update.before, update.after) == (
        str(btc_usdt.id),
        {
            "status": "active",
            "min_qty": "0.0001",
            "max_qty": "1000",
            "min_notional": "1",
            "market_order_price_band": "5",
            "market_change": change.id,
        },
        {
            "status": "active",
            "min_qty": "0.01",
            "max_qty": "50",
            "min_notional": "10",
            "market_order_price_band": None,
            "market_change": change.id,
        },
    )


def test_the_market_page_starts_the_draft_from_its_filters_and_an_untouched_one_is_accepted(client, operator, btc_usdt):
    """Break-it review: 1000 was filled in as 1E+3, which the form then refused as not a plain decimal."""
    btc_usdt.market_order_price_band = D("5")
    btc_usdt.save(update_fields=["market_order_price_band"])
    client.force_login(operator)
    form = client.get(f"{ADD}?market={btc_usdt.id}").context["form"]
    shown = {name: form[name].value() for name in ("market", *FILTERS)}
    assert shown == {
        "market": btc_usdt.id,
        "min_qty": "0.0001",
        "max_qty": "1000",
        "min_notional": "1",
        "market_order_price_band": "5",
    }
    assert client.get(f"{ADD}?market=x").context["form"].initial == {}

    drafted = client.post(ADD, {**shown, "min_notional": "2", "memo": "ticket 9"})
    assert drafted.status_code == 302
    assert (MarketChange.objects.get().max_qty, MarketChange.objects.get().min_notional) == (D("1000"), D("2"))
    listed = client.get("/admin/backoffice/marketchange/").content.decode()
    assert "0.000100000000000000" not in listed and "0.0001" in listed


@pytest.mark.parametrize(
    ("typed", "errors"),
    [
        ({"min_qty": "0.000000001"}, {"min_qty": ["At most 8 decimal places are allowed."]}),
        ({"min_qty": "0.00015"}, {"min_qty": ["Must be a multiple of the step size."]}),
        ({"min_qty": "5", "max_qty": "1"}, {"max_qty": ["Must be at least the minimum quantity."]}),
        ({"min_notional": "-1"}, {"min_notional": ["Ensure this value is greater than or equal to 0."]}),
        ({"min_notional": "\u0661"}, {"min_notional": [PLAIN_AMOUNT_MESSAGE]}),
        (
            {"market_order_price_band": "101"},
            {"market_order_price_band": ["Ensure this value is less than or equal to 100."]},
        ),
        ({"market_order_price_band": "0.001"}, {"market_order_price_band": ["At most 2 decimal places are allowed."]}),
        ({"memo": " "}, {"memo": ["This field is required."]}),
        ({}, {"market": ["These are BTC-USDT's filters already."]}),
    ],
)
def test_a_draft_is_checked_as_the_filters_are_and_nothing_is_drafted(client, operator, btc_usdt, typed, errors):
    client.force_login(operator)
    response = client.post(ADD, draft_form(btc_usdt, **typed))

    assert response.status_code == 200
    assert response.context["form"].errors == errors
    assert not MarketChange.objects.exists()
    assert not AuditLogEntry.objects.filter(action="market_change.draft").exists()


def test_one_change_per_market_awaits_a_decision(operator, approver, btc_usdt):
    first = draft(operator, btc_usdt, min_qty="0.01")
    with pytest.raises(InvalidState, match="A change of BTC-USDT's filters already awaits a decision."):
        draft(approver, btc_usdt, max_qty="10")
    with pytest.raises(IntegrityError), transaction.atomic():  # the database holds it too (market_change_one_pending)
        MarketChange.objects.create(
            market=btc_usdt, min_qty=D("1"), max_qty=D("2"), min_notional=D("0"), memo="x", created_by=approver
        )

    market_change_reject(change_id=first.id, approver_id=approver.id, note="not now")
    assert draft(approver, btc_usdt, max_qty="10").status == ChangeStatus.DRAFT


def test_its_author_cannot_decide_and_a_decision_is_final(operator, approver, btc_usdt):
    change = draft(approver, btc_usdt, min_qty="0.01")
    with pytest.raises(PermissionDenied, match="another operator than its author"):
        market_change_approve(change_id=change.id, approver_id=approver.id)
    with pytest.raises(PermissionDenied, match="approve_marketchange"):
        market_change_approve(change_id=change.id, approver_id=operator.id)  # an operator, not an approver
    assert filters(btc_usdt)[0] == D("0.0001")
    assert MarketChange.objects.get().status == ChangeStatus.DRAFT


def test_a_rejection_needs_a_note_and_keeps_the_filters(operator, approver, btc_usdt):
    change = draft(operator, btc_usdt, min_qty="0.01")
    before = filters(btc_usdt)

    with pytest.raises(DomainError) as refused:
        market_change_reject(change_id=change.id, approver_id=approver.id, note=" ")
    market_change_reject(change_id=change.id, approver_id=approver.id, note="too high for retail")

    assert refused.value.fields == {"note": "A reason is required."}
    change.refresh_from_db()
    assert (change.status, change.decision_note) == (ChangeStatus.REJECTED, "too high for retail")
    assert filters(btc_usdt) == before
    with pytest.raises(InvalidState, match="already rejected"):
        market_change_approve(change_id=change.id, approver_id=approver.id)
    assert not AuditLogEntry.objects.filter(action="market.update").exists()
