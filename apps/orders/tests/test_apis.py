"""The orders API (API.md): markets, depth, public trades, placing, listing and cancelling orders, fills."""

import json
import threading
from decimal import Decimal

import pytest
from django.db import connections

from apps.api.models import IdempotencyRecord
from apps.core.errors import DomainError
from apps.ledger.models import JournalEntry
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.models import Command, Order
from apps.orders.services import market_halt, order_place

from .helpers import balance, place

ORDERS = "/api/v1/orders/"


@pytest.fixture
def trader(btc_usdt, usdt):
    """SCENARIOS.md's T: 40,000 USDT."""
    trader = UserFactory()
    fund(trader, usdt, "40000")
    return trader


@pytest.fixture
def maker(btc_usdt, btc):
    """SCENARIOS.md's M: 1 BTC."""
    maker = UserFactory()
    fund(maker, btc, "1")
    return maker


def limit_buy(**overrides) -> dict:
    return {"market": "BTC-USDT", "side": "buy", "type": "limit", "price": "60000", "qty": "0.5", **overrides}


def test_a_null_client_order_id_is_none_as_an_order_without_one_shows_it(trader, api_as):
    """A break-it review: ``time_in_force: null`` was taken as the default and ``client_order_id: null`` was a 400,
    although an order without a client order id shows ``null``."""
    response = api_as(trader, "trade").post(ORDERS, limit_buy(client_order_id=None), format="json")

    assert response.status_code == 201, response.json()
    assert response.json()["client_order_id"] is None
    assert Order.objects.get().client_order_id == ""


# Public market data ------------------------------------------------------------------------------------


def test_markets_are_public_with_filters_at_the_assets_precision(btc_usdt, api):
    response = api.get("/api/v1/markets/")

    assert response.status_code == 200
    assert response.json() == [
        {
            "symbol": "BTC-USDT",
            "base": "BTC",
            "quote": "USDT",
            "tick_size": "0.010000",
            "step_size": "0.00010000",
            "min_qty": "0.00010000",
            "max_qty": "1000.00000000",
            "min_notional": "1.000000",
            "status": "active",
        }
    ]


def test_depth_aggregates_price_levels_best_first(maker, trader, api):
    place(maker, side="sell", price="59900", qty="0.2")
    place(maker, side="sell", price="59900", qty="0.1")
    place(maker, side="sell", price="61000", qty="0.3")
    place(trader, side="buy", price="58000", qty="0.1")
    place(trader, side="buy", price="58500", qty="0.2")

    depth = api.get("/api/v1/markets/BTC-USDT/depth/").json()

    assert depth["asks"] == [["59900.000000", "0.30000000"], ["61000.000000", "0.30000000"]]
    assert depth["bids"] == [["58500.000000", "0.20000000"], ["58000.000000", "0.10000000"]]
    assert depth["sequence"] == 5
    limited = api.get("/api/v1/markets/BTC-USDT/depth/?limit=1").json()
    assert (len(limited["asks"]), len(limited["bids"])) == (1, 1)


def test_public_trades_newest_first_with_the_takers_side(maker, trader, api):
    place(maker, side="sell", price="59900", qty="0.2")
    place(maker, side="sell", price="60000", qty="0.2")
    taker = place(trader, side="buy", price="60000", qty="0.3")

    trades = api.get("/api/v1/markets/BTC-USDT/trades/").json()

    assert [(t["id"], t["price"], t["qty"], t["side"]) for t in trades] == [
        (f"{taker.id}-2", "60000.000000", "0.10000000", "buy"),
        (f"{taker.id}-1", "59900.000000", "0.20000000", "buy"),
    ]
    assert trades[0]["time"].endswith("Z")
    assert len(api.get("/api/v1/markets/BTC-USDT/trades/?limit=1").json()) == 1


@pytest.mark.parametrize("path", ["/api/v1/markets/ETH-USDT/depth/", "/api/v1/markets/ETH-USDT/trades/"])
def test_unknown_markets_are_404(btc_usdt, api, path):
    response = api.get(path)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("limit", ["0", "1001", "-1", "x", "1.5"])
def test_market_data_limit_out_of_range_is_400(btc_usdt, api, limit):
    response = api.get(f"/api/v1/markets/BTC-USDT/depth/?limit={limit}")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"limit": "Out of range."}


# Placing -----------------------------------------------------------------------------------------------


def test_s1_partial_fill_with_price_improvement_then_cancel(maker, trader, api_as, btc, usdt):
    """SCENARIOS.md S1 through the API."""
    place(maker, side="sell", price="59900", qty="0.2")
    client = api_as(trader, "read", "trade")

    placed = client.post(ORDERS, limit_buy(), format="json")

    assert placed.status_code == 201
    order = placed.json()
    assert {
        key: order[key]
        for key in (
            "market",
            "side",
            "type",
            "price",
            "qty",
            "quote_qty",
            "filled_qty",
            "filled_quote_qty",
            "fee_total",
            "held_remaining",
            "time_in_force",
            "post_only",
            "status",
            "reject_reason",
            "client_order_id",
        )
    } == {
        "market": "BTC-USDT",
        "side": "buy",
        "type": "limit",
        "price": "60000.000000",
        "qty": "0.50000000",
        "quote_qty": None,
        "filled_qty": "0.20000000",
        "filled_quote_qty": "11980.000000",
        "fee_total": "0.00020000",
        "held_remaining": "18020.000000",
        "time_in_force": "GTC",
        "post_only": False,
        "status": "partially_filled",
        "reject_reason": None,
        "client_order_id": None,
    }
    assert order["created_at"].endswith("Z") and order["updated_at"].endswith("Z")
    assert balance(trader, usdt) == (Decimal("10000"), Decimal("18020"))

    cancelled = client.delete(f"{ORDERS}{order['id']}/")

    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["reject_reason"] == "cancelled"
    assert cancelled.json()["held_remaining"] == "0.000000"
    assert balance(trader, usdt) == (Decimal("28020"), Decimal("0"))
    assert balance(trader, btc) == (Decimal("0.1998"), Decimal("0"))


def test_a_market_buy_by_quote_budget(maker, trader, api_as):
    place(maker, side="sell", price="60000", qty="0.5")

    response = api_as(trader, "trade").post(
        ORDERS, {"market": "BTC-USDT", "side": "buy", "type": "market", "quote_qty": "600"}, format="json"
    )

    assert response.status_code == 201
    assert response.json() | {"id": 0, "created_at": "", "updated_at": ""} == {
        "id": 0,
        "client_order_id": None,
        "market": "BTC-USDT",
        "side": "buy",
        "type": "market",
        "price": None,
        "qty": None,
        "quote_qty": "600.000000",
        "filled_qty": "0.01000000",
        "filled_quote_qty": "600.000000",
        "fee_total": "0.00001000",
        "held_remaining": "0.000000",
        "time_in_force": "IOC",
        "post_only": False,
        "stp": "expire_taker",
        "status": "filled",
        "reject_reason": None,
        "created_at": "",
        "updated_at": "",
    }


def test_amounts_may_be_json_numbers(trader, api_as):
    body = '{"market": "BTC-USDT", "side": "buy", "type": "limit", "price": 59000.5, "qty": 0.25}'

    response = api_as(trader, "trade").post(ORDERS, body, content_type="application/json")

    assert response.status_code == 201
    assert (response.json()["price"], response.json()["qty"]) == ("59000.500000", "0.25000000")


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        (limit_buy(qty="1"), 400, "insufficient_funds", "qty"),
        pytest.param(
            {"market": "BTC-USDT", "side": "buy", "type": "market", "quote_qty": "40000.01"},
            400,
            "insufficient_funds",
            "quote_qty",
            id="budget: the field was empty",
        ),
        (limit_buy(price="60000.005"), 400, "invalid_price", "price"),
        (limit_buy(qty="0.00005"), 400, "invalid_quantity", "qty"),
        (limit_buy(qty="0.0001", price="100"), 400, "min_notional", "qty"),
        (
            limit_buy(type="market", price=None, qty="0.1", time_in_force="FOK"),
            400,
            "fok_not_fillable",
            "time_in_force",
        ),
        # Break-it review: DRF's BooleanField took these as true (or false); a JSON body's boolean is true or false.
        *((limit_buy(post_only=raw), 400, "invalid_request", "post_only") for raw in ("yes", "true", 1, "0", None)),
    ],
)
def test_refused_orders_answer_the_reason_and_leave_nothing(trader, api_as, usdt, body, status, code, field):
    response = api_as(trader, "trade").post(ORDERS, body, format="json")

    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code
    assert list(error["fields"]) == [field]
    assert not Order.objects.exists()
    assert balance(trader, usdt) == (Decimal("40000"), Decimal("0"))


def test_post_only_that_would_take_is_refused(maker, trader, api_as):
    place(maker, side="sell", price="59900", qty="0.2")
    response = api_as(trader, "trade").post(ORDERS, limit_buy(post_only=True), format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "post_only_would_take"
    assert Order.objects.filter(user=trader).count() == 0


def test_an_order_on_a_halted_market_is_409(trader, api_as, btc_usdt):
    market_halt(market_id=btc_usdt.id, operator_id=UserFactory().id, reason="test")
    response = api_as(trader, "trade").post(ORDERS, limit_buy(), format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "market_halted"


# Bad input: a 400 naming the field, nothing written --------------------------------------------------------

BAD_AMOUNTS = [
    pytest.param('"NaN"', id="NaN"),
    pytest.param('"sNaN"', id="sNaN"),
    pytest.param('"Infinity"', id="Infinity"),
    pytest.param('"-Infinity"', id="-Infinity"),
    pytest.param('"1E+2"', id="exponent"),
    pytest.param("1e400", id="huge number"),
    pytest.param("1e-400", id="tiny number"),
    pytest.param('"-5"', id="negative"),
    pytest.param("-5", id="negative number"),
    pytest.param('"0"', id="zero"),
    pytest.param('""', id="empty"),
    pytest.param('" 1"', id="blank"),
    pytest.param("true", id="boolean"),
    pytest.param("[1]", id="list"),
    pytest.param('{"amount": 1}', id="object"),
    pytest.param('"100000000000000000000"', id="too large"),
]


def post_raw(client, url: str, body: dict, field: str, raw_json: str):
    """POST ``body`` with ``field`` set to the JSON text ``raw_json`` exactly as written."""
    text = json.dumps({**body, field: "__RAW__"}).replace('"__RAW__"', raw_json)
    return client.post(url, text, content_type="application/json")


def nothing_was_written(trader, usdt, btc) -> bool:
    return (
        not Order.objects.exists()
        and not IdempotencyRecord.objects.exists()
        and balance(trader, usdt) == (Decimal("40000"), Decimal("0"))
        and balance(trader, btc) == (0, 0)
        and JournalEntry.objects.count() == 1  # the funding
    )


@pytest.mark.parametrize(
    ("field", "code", "too_many_decimals"),
    [
        ("price", "invalid_price", '"60000.0000001"'),
        ("qty", "invalid_quantity", '"0.100000001"'),
    ],
)
@pytest.mark.parametrize("raw", [*BAD_AMOUNTS, pytest.param(None, id="too many decimals")])
def test_bad_amounts_are_400_naming_the_field(trader, api_as, usdt, btc, field, code, too_many_decimals, raw):
    response = post_raw(api_as(trader, "trade"), ORDERS, limit_buy(), field, raw or too_many_decimals)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == code
    assert set(error["fields"]) == {field}
    assert nothing_was_written(trader, usdt, btc)


@pytest.mark.parametrize("raw", [*BAD_AMOUNTS, pytest.param('"600.0000001"', id="too many decimals")])
def test_bad_quote_budgets_are_400_naming_the_field(trader, api_as, usdt, btc, raw):
    body = {"market": "BTC-USDT", "side": "buy", "type": "market"}
    response = post_raw(api_as(trader, "trade"), ORDERS, body, "quote_qty", raw)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_quantity"
    assert set(response.json()["error"]["fields"]) == {"quote_qty"}
    assert nothing_was_written(trader, usdt, btc)


@pytest.mark.parametrize(
    ("field", "raw"),
    [
        ("market", '"ETH-USDT"'),
        ("market", '""'),
        ("market", "7"),
        ("market", "null"),
        ("market", '"BTC-USDT\\u0000"'),
        ("side", '"hold"'),
        ("side", "1"),
        ("type", '"stop"'),
        ("type", '""'),
        ("time_in_force", '"GTD"'),
        ("stp", '"none"'),
        ("post_only", '"maybe"'),
        ("client_order_id", "12"),
        ("client_order_id", '"' + "x" * 65 + '"'),
        ("client_order_id", '"\\ud800"'),
        pytest.param("client_order_id", '"a\\nb"', id="line break: GET /orders/?client_order_id= could not name it"),
        ("client_order_id", '"a\\tb"'),
        ("client_order_id", '"\\u202eab"'),
        ("client_order_id", '"a\\u200bb"'),
    ],
)
def test_bad_fields_are_400_naming_the_field(trader, api_as, usdt, btc, field, raw):
    response = post_raw(api_as(trader, "trade"), ORDERS, limit_buy(), field, raw)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert set(response.json()["error"]["fields"]) == {field}
    assert nothing_was_written(trader, usdt, btc)


@pytest.mark.parametrize("engine", ["inline", "sequencer"])
@pytest.mark.parametrize(
    ("body", "field"),
    [
        (limit_buy(price="1000\x00"), "price"),
        (limit_buy(qty="0.01\x00"), "qty"),
        (limit_buy(price="\ud800"), "price"),
        ({"market": "BTC-USDT", "side": "buy", "type": "market", "quote_qty": "\x00"}, "quote_qty"),
    ],
)
def test_an_amount_no_database_text_can_hold_is_400_naming_it(trader, api_as, usdt, btc, settings, engine, body, field):
    """A NUL reached the sequencer's jsonb command payload: a 500 (psycopg's UntranslatableCharacter)."""
    settings.ORDERS_ENGINE = engine
    response = api_as(trader, "trade").post(ORDERS, json.dumps(body), content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert set(response.json()["error"]["fields"]) == {field}
    assert nothing_was_written(trader, usdt, btc)


@pytest.mark.parametrize(
    ("field", "value"), [("price", "1000\x00"), ("client_order_id", "a\x00"), ("market", "\ud800")]
)
def test_the_sequencer_queues_no_command_its_payload_cannot_hold(trader, settings, field, value):
    """Every caller of order_place (API, /api/v3, web, admin) is covered at the queue, not only /api/v1."""
    settings.ORDERS_ENGINE = "sequencer"
    arguments = {"market": "BTC-USDT", "side": "buy", "price": "1000", "qty": "0.01", field: value}
    with pytest.raises(DomainError) as refused:
        order_place(user_id=trader.id, **arguments)
    assert set(refused.value.fields) == {field}
    assert not Command.objects.exists()


@pytest.mark.parametrize("text", ["[]", '"order"', "{", '{"price": NaN}'])
def test_a_body_that_is_not_a_json_object_is_400(trader, api_as, usdt, btc, text):
    response = api_as(trader, "trade").post(ORDERS, text, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert nothing_was_written(trader, usdt, btc)


# client_order_id and Idempotency-Key ------------------------------------------------------------------


def test_client_order_id_again_with_the_same_order_returns_the_original(trader, api_as):
    client = api_as(trader, "trade")
    first = client.post(ORDERS, limit_buy(client_order_id="mine-1"), format="json")
    again = client.post(ORDERS, limit_buy(client_order_id="mine-1", price="60000.00"), format="json")

    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert first.json()["client_order_id"] == "mine-1"
    assert Order.objects.count() == 1


def test_client_order_id_again_with_another_order_is_409(trader, api_as, usdt):
    client = api_as(trader, "trade")
    client.post(ORDERS, limit_buy(client_order_id="mine-2"), format="json")

    response = client.post(ORDERS, limit_buy(client_order_id="mine-2", price="59000"), format="json")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "idempotency_conflict"
    assert set(response.json()["error"]["fields"]) == {"client_order_id"}
    assert Order.objects.count() == 1
    assert balance(trader, usdt) == (Decimal("10000"), Decimal("30000"))


def test_client_order_ids_are_per_user(trader, api_as, usdt):
    other = UserFactory()
    fund(other, usdt, "40000")
    api_as(trader, "trade").post(ORDERS, limit_buy(client_order_id="same"), format="json")
    response = api_as(other, "trade").post(ORDERS, limit_buy(client_order_id="same", price="59000"), format="json")
    assert response.status_code == 201
    assert Order.objects.count() == 2


def test_idempotency_key_replays_the_original_response(trader, api_as, usdt):
    client = api_as(trader, "trade")
    first = client.post(ORDERS, limit_buy(), format="json", HTTP_IDEMPOTENCY_KEY="order-k1")
    again = client.post(ORDERS, limit_buy(), format="json", HTTP_IDEMPOTENCY_KEY="order-k1")

    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1
    assert balance(trader, usdt) == (Decimal("10000"), Decimal("30000"))


def test_idempotency_key_with_another_body_is_409(trader, api_as):
    client = api_as(trader, "trade")
    client.post(ORDERS, limit_buy(), format="json", HTTP_IDEMPOTENCY_KEY="order-k2")

    response = client.post(ORDERS, limit_buy(qty="0.1"), format="json", HTTP_IDEMPOTENCY_KEY="order-k2")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "idempotency_conflict"
    assert Order.objects.count() == 1


def test_a_refused_order_does_not_use_up_its_idempotency_key(trader, api_as, usdt):
    client = api_as(trader, "trade")
    refused = client.post(ORDERS, limit_buy(qty="1"), format="json", HTTP_IDEMPOTENCY_KEY="order-k3")
    assert refused.json()["error"]["code"] == "insufficient_funds"

    fund(trader, usdt, "20000")
    accepted = client.post(ORDERS, limit_buy(qty="1"), format="json", HTTP_IDEMPOTENCY_KEY="order-k3")
    assert accepted.status_code == 201


def _concurrently(clients, post) -> list:
    barrier = threading.Barrier(len(clients))
    responses = []

    def run(client):
        barrier.wait()
        try:
            responses.append(post(client))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return responses


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("duplicate", ["Idempotency-Key", "client_order_id"])
def test_concurrent_duplicates_place_one_order(trader, api_as, usdt, duplicate):
    clients = [api_as(trader, "trade") for _ in range(6)]
    if duplicate == "Idempotency-Key":
        responses = _concurrently(
            clients, lambda c: c.post(ORDERS, limit_buy(), format="json", HTTP_IDEMPOTENCY_KEY="race")
        )
    else:
        responses = _concurrently(clients, lambda c: c.post(ORDERS, limit_buy(client_order_id="race"), format="json"))

    # A duplicate arriving while the first is placed is refused as in use (Idempotency-Key: it would queue behind
    # it), or answered as the first was; one order either way.
    placed = [response for response in responses if response.status_code == 201]
    in_use = [response for response in responses if response.status_code == 409]
    assert placed and len(placed) + len(in_use) == 6
    assert not in_use or duplicate == "Idempotency-Key"
    assert {response.json()["error"]["code"] for response in in_use} <= {"idempotency_key_in_use"}
    assert len({response.json()["id"] for response in placed}) == 1
    assert Order.objects.count() == 1
    assert balance(trader, usdt) == (Decimal("10000"), Decimal("30000"))


# Reading and cancelling ------------------------------------------------------------------------------------


def test_orders_list_filters_by_market_and_status(maker, trader, api_as):
    resting = place(trader, side="buy", price="50000", qty="0.1")
    cancelled = place(trader, side="buy", price="51000", qty="0.1")
    client = api_as(trader, "read", "trade")
    client.delete(f"{ORDERS}{cancelled.id}/")
    place(maker, side="sell", price="70000", qty="0.1")

    def ids(query=""):
        return [order["id"] for order in client.get(f"{ORDERS}{query}").json()]

    assert ids() == [cancelled.id, resting.id]
    assert ids("?status=open") == [resting.id]
    assert ids("?status=closed") == [cancelled.id]
    assert ids("?market=BTC-USDT&limit=1") == [cancelled.id]
    unknown = client.get(f"{ORDERS}?market=ETH-USDT")  # no such market here: said so, not an empty list
    assert (unknown.status_code, unknown.json()["error"]["fields"]) == (404, {"market": "No such market."})
    assert client.get(f"{ORDERS}?status=filled").json()["error"]["fields"] == {"status": "Must be open or closed."}


def test_orders_list_finds_the_order_of_a_client_order_id(maker, trader, api_as):
    """What the 504 order_status_unknown tells the caller to ask (it was a 400 "Unknown query parameter")."""
    mine = place(trader, side="buy", price="50000", qty="0.1", client_order_id="late-1")
    place(trader, side="buy", price="51000", qty="0.1", client_order_id="other")
    place(maker, side="sell", price="70000", qty="0.1", client_order_id="late-1")  # another user's: not listed
    client = api_as(trader, "read")

    found = client.get(f"{ORDERS}?client_order_id=late-1")

    assert found.status_code == 200
    assert [(o["id"], o["client_order_id"]) for o in found.json()] == [(mine.id, "late-1")]
    assert client.get(f"{ORDERS}?client_order_id=never").json() == []
    assert client.get(f"{ORDERS}?client_order_id=late-1&paginate=1").json()["results"][0]["id"] == mine.id


def test_an_order_by_id(trader, api_as):
    order = place(trader, side="buy", price="50000", qty="0.1")
    response = api_as(trader, "read").get(f"{ORDERS}{order.id}/")
    assert response.status_code == 200
    assert (response.json()["id"], response.json()["status"], response.json()["held_remaining"]) == (
        order.id,
        "open",
        "5000.000000",
    )


def test_cancelling_an_ended_order_is_409(maker, trader, api_as):
    place(maker, side="sell", price="60000", qty="0.5")
    filled = place(trader, side="buy", price="60000", qty="0.5")

    response = api_as(trader, "trade").delete(f"{ORDERS}{filled.id}/")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_state"


def test_another_users_order_is_404_and_stays_open(trader, api_as, usdt):
    order = place(trader, side="buy", price="50000", qty="0.1")
    intruder = api_as(UserFactory(), "read", "trade")

    assert intruder.get(f"{ORDERS}{order.id}/").status_code == 404
    deleted = intruder.delete(f"{ORDERS}{order.id}/")
    assert deleted.status_code == 404
    assert deleted.json()["error"]["code"] == "not_found"
    assert intruder.get(ORDERS).json() == []
    assert Order.objects.get(id=order.id).status == "open"


@pytest.mark.parametrize("order_id", ["0", "-1", "abc", "99999999999999999999999", "1.5", "%00"])
def test_impossible_order_ids_are_404_in_the_error_shape(trader, api_as, order_id):
    response = api_as(trader, "read").get(f"{ORDERS}{order_id}/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_my_fills_as_maker_and_taker(maker, trader, api_as):
    resting = place(maker, side="sell", price="59900", qty="0.2")
    taker = place(trader, side="buy", price="60000", qty="0.5")

    trader_fills = api_as(trader, "read").get("/api/v1/trades/").json()
    maker_fills = api_as(maker, "read").get("/api/v1/trades/?market=BTC-USDT").json()

    assert [{k: v for k, v in fill.items() if k != "time"} for fill in trader_fills] == [
        {
            "id": f"{taker.id}-1",
            "order_id": taker.id,
            "market": "BTC-USDT",
            "side": "buy",
            "price": "59900.000000",
            "qty": "0.20000000",
            "quote_qty": "11980.000000",
            "fee": "0.00020000",
            "fee_asset": "BTC",
            "liquidity": "taker",
        }
    ]
    assert [(f["order_id"], f["side"], f["fee"], f["fee_asset"], f["liquidity"]) for f in maker_fills] == [
        (resting.id, "sell", "11.980000", "USDT", "maker")
    ]
    assert api_as(UserFactory(), "read").get("/api/v1/trades/").json() == []


def test_an_order_whose_value_is_beyond_any_amount_is_a_400_not_a_500(db, api_as, usdt, btc):
    from decimal import Decimal as Dec

    from apps.ledger.tests.factories import UserFactory, fund
    from apps.orders.models import FeeSchedule, Order
    from apps.orders.services import market_create

    FeeSchedule.objects.update_or_create(
        is_default=True, defaults={"name": "default", "maker_rate": Dec("0.001"), "taker_rate": Dec("0.001")}
    )
    market_create(
        base=btc,
        quote=usdt,
        tick_size=Dec("0.01"),
        step_size=Dec("0.0001"),
        min_qty=Dec("0.0001"),
        max_qty=Dec("1000"),
        min_notional=Dec("1"),
    )
    trader = UserFactory()
    fund(trader, usdt, "1000")
    response = api_as(trader, "trade").post(
        "/api/v1/orders/",
        {"market": "BTC-USDT", "side": "buy", "type": "limit", "price": "99999999999999999999", "qty": "100"},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"qty": response.json()["error"]["message"]}
    assert not Order.objects.exists()


def test_without_redis_the_rate_limits_let_requests_through_instead_of_failing_them(
    funded_user, btc_usdt, api_as, redis_unreachable
):
    client = api_as(funded_user(usdt="1000"), "read", "trade")

    balances = client.get("/api/v1/balances/")
    placed = client.post(
        "/api/v1/orders/",
        {"market": "BTC-USDT", "side": "buy", "type": "limit", "price": "100", "qty": "0.01"},
        format="json",
    )

    assert balances.status_code == 200
    assert placed.status_code == 201
    assert placed.json()["status"] == "open"
