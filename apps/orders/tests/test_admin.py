"""Back office: markets with halt and resume, fee schedules, orders and trades read-only."""

import threading
import time
from decimal import Decimal

import psycopg
import pytest
from django.contrib.messages import get_messages
from django.db import connection, connections
from django.urls import reverse

from apps.audit.models import AuditLogEntry
from apps.ledger.forms import PLAIN_AMOUNT_MESSAGE
from apps.ledger.tests.factories import AssetFactory, UserFactory, fund
from apps.orders.models import Command, CommandKind, CommandStatus, FeeSchedule, Market, MarketStatus
from apps.orders.services import commands as engine_commands
from apps.orders.services import fee_schedule_make_default, market_create
from apps.orders.tests.helpers import place
from apps.wallets.tests.conftest import backend_pids, database_url, wait_for

D = Decimal


@pytest.fixture
def operator(admin_client):
    return admin_client


@pytest.fixture
def trading(btc_usdt, btc, usdt):
    buyer, seller = UserFactory(), UserFactory()
    fund(buyer, usdt, "10000")
    fund(seller, btc, "1")
    place(seller, side="sell", price="50000", qty="0.1")
    return place(buyer, side="buy", price="50000", qty="0.1")


def test_every_screen_lists(operator, trading):
    for name in ("market", "feeschedule", "order", "trade"):
        response = operator.get(reverse(f"admin:orders_{name}_changelist"))
        assert response.status_code == 200, name
    assert b"50000" in operator.get(reverse("admin:orders_trade_changelist")).content


def test_orders_and_trades_are_read_only(operator, trading):
    url = reverse("admin:orders_order_change", args=[trading.id])
    assert operator.get(url).status_code == 200
    assert operator.post(url, {"status": "cancelled"}).status_code == 403
    assert operator.get(reverse("admin:orders_order_add")).status_code == 403
    assert operator.get(reverse("admin:orders_trade_add")).status_code == 403


def test_halt_and_resume_actions_ask_for_a_confirmation_and_a_reason(operator, btc_usdt):
    url = reverse("admin:orders_market_changelist")
    asked = operator.post(url, {"action": "halt", "_selected_action": [btc_usdt.id]})
    assert asked.status_code == 200 and b'name="reason"' in asked.content and b"Yes, halt" in asked.content
    assert Market.objects.get().status == MarketStatus.ACTIVE  # nothing until confirmed
    no_reason = operator.post(
        url, {"action": "halt", "_selected_action": [btc_usdt.id], "confirm": "yes", "reason": ""}
    )
    assert b"A reason is required." in no_reason.content and Market.objects.get().status == MarketStatus.ACTIVE
    confirmed = {"_selected_action": [btc_usdt.id], "confirm": "yes", "reason": "price feed outage"}
    operator.post(url, {"action": "halt", **confirmed})
    assert Market.objects.get().status == MarketStatus.HALTED
    operator.post(url, {"action": "resume", **confirmed, "reason": "feed back"})
    assert Market.objects.get().status == MarketStatus.ACTIVE


def market_form(btc, usdt, **overrides):
    return {
        "symbol": "BTC-USDT",
        "base": btc.id,
        "quote": usdt.id,
        "tick_size": "0.01",
        "step_size": "0.0001",
        "min_qty": "0.0001",
        "max_qty": "100",
        "min_notional": "1",
        **overrides,
    }


def test_adding_a_market_applies_the_precision_rule(operator, btc, usdt, default_fees):
    url = reverse("admin:orders_market_add")
    response = operator.post(url, market_form(btc, usdt, tick_size="0.001"))
    assert response.status_code == 200  # the form again, with the error
    assert b"would not be exact" in response.content
    assert not Market.objects.exists()

    response = operator.post(url, market_form(btc, usdt))
    assert response.status_code == 302
    assert Market.objects.get().tick_size == D("0.01")


def test_a_new_markets_symbol_is_its_assets_codes_and_never_another_markets_binance_symbol(
    operator, btc, usdt, default_fees
):
    url = reverse("admin:orders_market_add")
    created = operator.post(url, market_form(btc, usdt, symbol="USDT-BTC"))  # a typed symbol is not a field
    same_pair = operator.post(url, market_form(btc, usdt))
    btcu, sdt = AssetFactory(code="BTCU", decimals=8), AssetFactory(code="SDT", decimals=6)
    same_binance_symbol = operator.post(url, market_form(btcu, sdt))

    assert created.status_code == 302
    assert same_pair.status_code == 200  # the form again, with the error
    assert same_pair.context["adminform"].form.errors == {"quote": ["BTC-USDT already trades BTC against USDT."]}
    assert same_binance_symbol.context["adminform"].form.errors == {
        "base": ["BTC-USDT already reads BTCUSDT without its dash (its symbol in the Binance API)."]
    }
    assert list(Market.objects.values_list("symbol", flat=True)) == ["BTC-USDT"]


@pytest.mark.django_db(transaction=True)
def test_a_market_another_operator_lists_at_the_same_moment_is_a_message_not_a_500(
    admin_client, btc, usdt, default_fees
):
    """The other operator's market is written but not committed while this form is checked; this save then waits
    on the unique index, and fails once the other commits."""
    other = psycopg.connect(database_url(connection.settings_dict))
    other.execute(
        "INSERT INTO orders_market (symbol, base_id, quote_id, tick_size, step_size, min_qty, max_qty, min_notional,"
        " status, sequence, created_at, updated_at) VALUES ('BTC-USDT', %s, %s, 0.01, 0.0001, 0.0001, 100, 1,"
        " 'active', 0, now(), now())",
        [btc.id, usdt.id],
    )
    responses = []

    def submit() -> None:
        try:
            responses.append(admin_client.post(reverse("admin:orders_market_add"), market_form(btc, usdt)))
        finally:
            connections.close_all()  # this thread's

    form = threading.Thread(target=submit)
    form.start()
    try:
        wait_for(lambda: backend_pids("wait_event_type = 'Lock' AND query LIKE 'INSERT INTO \"orders_market\"%%'"))
    finally:
        other.commit()
        other.close()
        form.join(timeout=60)

    (response,) = responses
    assert response.status_code == 302  # back to the form, with the reason
    message = [str(m) for m in get_messages(response.wsgi_request)]
    assert message == ["Not saved: The market cannot be listed. BTC-USDT already trades BTC against USDT."]
    assert Market.objects.count() == 1
    assert not AuditLogEntry.objects.filter(action="market.create").exists()


@pytest.mark.django_db(transaction=True)
def test_a_halt_the_matching_engine_does_not_confirm_in_time_is_a_warning_not_a_500(admin_client, btc_usdt, settings):
    settings.ORDERS_ENGINE = "sequencer"  # and no run_engine process: nobody answers
    settings.ORDERS_ENGINE_WAIT_SECONDS = 0.3
    confirmed = {"action": "halt", "_selected_action": [btc_usdt.id], "confirm": "yes", "reason": "feed outage"}
    try:
        response = admin_client.post(reverse("admin:orders_market_changelist"), confirmed, follow=True)
    finally:
        engine_commands.queue_connection_close()

    assert response.status_code == 200
    assert [str(message) for message in response.context["messages"]] == [
        "The halt of BTC-USDT is queued for the matching engine, which has not confirmed it yet: it takes effect "
        "(and is audited) when the engine applies it. Check the market's status before acting again."
    ]
    assert Market.objects.get().status == MarketStatus.ACTIVE
    assert list(Command.objects.values_list("kind", "status")) == [(CommandKind.HALT, CommandStatus.PENDING)]


@pytest.mark.django_db(transaction=True)
def test_halting_several_markets_with_the_engine_down_waits_once_for_all_of_them(
    admin_client, btc, usdt, btc_usdt, settings
):
    others = [
        market_create(
            base=AssetFactory(code=code, decimals=8),
            quote=usdt,
            tick_size=D("0.01"),
            step_size=D("0.0001"),
            min_qty=D("0.0001"),
            max_qty=D("1000"),
            min_notional=D("1"),
        )  # fmt: skip
        for code in ("ETH", "SOL")
    ]
    settings.ORDERS_ENGINE = "sequencer"  # and no run_engine process: nobody answers
    settings.ORDERS_ENGINE_WAIT_SECONDS = 1.5
    selected = [btc_usdt.id, *(market.id for market in others)]
    confirmed = {"action": "halt", "_selected_action": selected, "confirm": "yes", "reason": "feed outage"}
    began = time.monotonic()
    try:
        response = admin_client.post(reverse("admin:orders_market_changelist"), confirmed, follow=True)
    finally:
        engine_commands.queue_connection_close()

    # One wait in all (1.5 s), not one per market (4.5 s), which kept an operator's page hanging past a proxy's timeout.
    assert time.monotonic() - began < 3.0
    (message,) = [str(message) for message in response.context["messages"]]
    assert message.startswith("The halt of BTC-USDT, ETH-USDT, SOL-USDT is queued for the matching engine")
    assert (
        list(Command.objects.order_by("id").values_list("kind", "status"))
        == [(CommandKind.HALT, CommandStatus.PENDING)] * 3
    )  # every halt queued: each takes effect when the engine applies it


def test_the_add_form_proposes_a_price_band_for_market_orders(operator, db):
    form = operator.get(reverse("admin:orders_market_add")).context["adminform"].form
    assert form.initial["market_order_price_band"] == D("5")


def test_a_markets_page_changes_nothing_and_links_to_a_drafted_change(operator, btc_usdt):
    """Its filters change through a market change another operator approves (apps/backoffice, test_market_changes)."""
    url = reverse("admin:orders_market_change", args=[btc_usdt.id])
    page = operator.get(url).content.decode()
    response = operator.post(url, {"min_qty": "0.001", "max_qty": "50", "min_notional": "10", "tick_size": "1"})

    assert response.status_code == 403
    assert f"/admin/backoffice/marketchange/add/?market={btc_usdt.id}" in page
    btc_usdt.refresh_from_db()
    assert (btc_usdt.min_qty, btc_usdt.max_qty, btc_usdt.min_notional, btc_usdt.tick_size) == (
        D("0.0001"),
        D("1000"),
        D("1"),
        D("0.01"),
    )


@pytest.mark.parametrize("typed", ["\u0661", "1e1", "\uff11", " 1 0 "])
def test_a_new_markets_min_notional_not_in_plain_ascii_digits_is_a_field_error(operator, btc, usdt, typed):
    """Break-it review: an Arabic-Indic digit (U+0661) was saved as a market's minimum notional; the traders' forms
    refuse such input, and exponents, as parse_amount does."""
    form = {"base": btc.id, "quote": usdt.id, "tick_size": "0.01", "step_size": "0.0001", "min_qty": "0.0001"}
    response = operator.post(reverse("admin:orders_market_add"), {**form, "max_qty": "50", "min_notional": typed})

    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"min_notional": [PLAIN_AMOUNT_MESSAGE]}
    assert not Market.objects.exists()
    accepted = operator.post(reverse("admin:orders_market_add"), {**form, "max_qty": "50", "min_notional": " 10.5 "})
    assert accepted.status_code == 302
    assert Market.objects.get().min_notional == D("10.5")


def test_the_default_fee_schedule_cannot_be_deleted(operator, default_fees):
    other = FeeSchedule.objects.create(name="vip", maker_rate=D("0"), taker_rate=D("0.0005"))
    assert operator.get(reverse("admin:orders_feeschedule_delete", args=[default_fees.id])).status_code == 403
    assert operator.get(reverse("admin:orders_feeschedule_delete", args=[other.id])).status_code == 200


def test_make_default_moves_the_default_without_a_gap(default_fees):
    vip = FeeSchedule.objects.create(name="VIP", maker_rate=D("0"), taker_rate=D("0.0005"))

    fee_schedule_make_default(schedule_id=vip.id)  # in the admin: an approved fee change (apps/backoffice)

    assert list(FeeSchedule.objects.filter(is_default=True).values_list("name", flat=True)) == ["VIP"]


def test_fee_schedules_are_not_editable_in_their_form(operator, default_fees):
    response = operator.post(
        reverse("admin:orders_feeschedule_change", args=[default_fees.id]),
        {
            "name": default_fees.name,
            "maker_rate": "0.5",
            "taker_rate": "0.5",
            "is_default": "",
            "tiers-TOTAL_FORMS": "0",
            "tiers-INITIAL_FORMS": "0",
            "tiers-MIN_NUM_FORMS": "0",
            "tiers-MAX_NUM_FORMS": "1000",
        },
    )
    assert response.status_code == 403  # changes are drafted as fee changes, approved by another operator
    schedule = FeeSchedule.objects.get(id=default_fees.id)
    assert (schedule.is_default, schedule.taker_rate) == (True, default_fees.taker_rate)
    assert operator.get(reverse("admin:orders_feeschedule_add")).status_code == 403


def test_without_a_default_fee_schedule_fills_are_refused_with_a_503_not_a_500(btc_usdt, btc, usdt, api_as):
    seller, buyer = UserFactory(), UserFactory()
    fund(seller, btc, "1")
    fund(buyer, usdt, "1000")
    place(seller, side="sell", price="100", qty="1")
    FeeSchedule.objects.update(is_default=False)

    response = api_as(buyer, "trade").post(
        "/api/v1/orders/",
        {"market": "BTC-USDT", "side": "buy", "type": "limit", "price": "100", "qty": "1"},
        format="json",
    )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"


def test_market_changes_are_in_the_audit_log(operator, btc, usdt, default_fees):
    from apps.audit.models import AuditLogEntry

    operator.post(
        reverse("admin:orders_market_add"),
        {
            "base": btc.id,
            "quote": usdt.id,
            "tick_size": "0.01",
            "step_size": "0.0001",
            "min_qty": "0.0001",
            "max_qty": "1000",
            "min_notional": "1",
            "market_order_price_band": "5",
        },
    )
    market = Market.objects.get()
    operator.post(
        reverse("admin:orders_market_changelist"),
        {"action": "halt", "_selected_action": [market.id], "confirm": "yes", "reason": "maintenance"},
    )

    log = list(
        AuditLogEntry.objects.filter(object_type="orders.market", object_id=str(market.id))
        .order_by("id")
        .values_list("action", "before", "after")
    )
    assert [action for action, *_ in log] == ["market.create", "market.halt"]
    assert log[0][1] == {} and log[0][2] == {
        "status": "active",
        "min_qty": "0.0001",
        "max_qty": "1000",
        "min_notional": "1",
        "market_order_price_band": "5",
    }
    assert log[1][1]["status"] == "active" and log[1][2]["status"] == "halted"
    assert log[1][2]["reason"] == "maintenance"


def test_an_operator_cancels_a_customers_open_order_with_a_reason_audited(client, btc_usdt, btc, usdt):
    """A break-it review: no operator could cancel a trader's order (the order screen is read-only)."""
    from django.contrib.auth.models import Group

    from apps.orders.models import EndReason, Order, OrderStatus
    from apps.orders.tests.helpers import balance

    operator = UserFactory(username="olga", is_staff=True)
    operator.groups.add(Group.objects.get(name="operators"))
    seller, buyer = UserFactory(), UserFactory()
    fund(seller, btc, "1")
    fund(buyer, usdt, "10000")
    resting = place(seller, side="sell", price="50000", qty="0.3")
    place(buyer, side="buy", price="50000", qty="0.1")  # fills a part: 0.2 BTC still held
    filled = Order.objects.filter(user=buyer).get()
    client.force_login(operator)
    url = reverse("admin:orders_order_changelist")
    selected = {"action": "cancel_orders", "_selected_action": [resting.id, filled.id]}

    asked = client.post(url, selected)
    assert asked.status_code == 200 and b'name="reason"' in asked.content and b"Yes, cancel" in asked.content
    assert b"A reason is required." in client.post(url, {**selected, "confirm": "yes", "reason": " "}).content
    assert Order.objects.get(id=resting.id).status == OrderStatus.PARTIALLY_FILLED  # nothing until confirmed

    done = client.post(url, {**selected, "confirm": "yes", "reason": "customer request, ticket 881"})
    shown = [str(m) for m in get_messages(done.wsgi_request)]
    assert shown == [
        f"Cancelled #{resting.id}. Reason recorded in the audit log.",
        f"Not cancelled: #{filled.id}: Order {filled.id} is filled: it can no longer be cancelled.",
    ]
    cancelled = Order.objects.get(id=resting.id)
    assert (cancelled.status, cancelled.reject_reason, cancelled.held_remaining) == (
        OrderStatus.CANCELLED,
        EndReason.CANCELLED_BY_OPERATOR,
        D("0"),
    )
    assert balance(seller, btc) == (D("0.9"), D("0"))  # 0.1 sold, the 0.2 held released
    entry = AuditLogEntry.objects.get(action="order.cancel_by_operator")
    assert (entry.actor_id, entry.object_type, entry.object_id) == (operator.id, "orders.order", str(resting.id))
    assert (entry.before, entry.after) == (
        {"status": "partially_filled"},
        {"status": "cancelled", "reason": "customer request, ticket 881"},
    )


def test_staff_without_the_cancel_permission_cannot_cancel_orders(client, btc_usdt, btc):
    from django.contrib.auth.models import Permission

    from apps.orders.models import Order, OrderStatus

    viewer = UserFactory(is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_order"))
    seller = UserFactory()
    fund(seller, btc, "1")
    resting = place(seller, side="sell", price="50000", qty="0.3")
    client.force_login(viewer)
    url = reverse("admin:orders_order_changelist")

    assert b"cancel_orders" not in client.get(url).content
    client.post(url, {"action": "cancel_orders", "_selected_action": [resting.id], "confirm": "yes", "reason": "x"})
    assert Order.objects.get(id=resting.id).status == OrderStatus.OPEN
    assert not AuditLogEntry.objects.filter(action="order.cancel_by_operator").exists()
