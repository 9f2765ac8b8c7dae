"""Lists: cursor walks (exactly once, also while rows are inserted), cursors that cannot be forged or
moved to another user or list, start/end filters, and unknown query parameters refused on every GET."""

import threading
import time
from datetime import timedelta, timezone

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from apps.api.pagination import _cursor_encode
from apps.ledger.tests.factories import UserFactory, fund
from apps.ledger.tests.threads import run_concurrently
from apps.orders.models import Order, Trade
from apps.orders.tests.helpers import place


def walk(client: APIClient, path: str, *, limit: int, pause: float = 0) -> list[dict]:
    """Every row of the list, page after page (``limit`` rows each), following ``next`` to the end."""
    rows, query = [], {"paginate": "1", "limit": str(limit)}
    while True:
        response = client.get(path, query)
        assert response.status_code == 200, response.json()
        body = response.json()
        rows += body["results"]
        if body["next"] is None:
            return rows
        query = {"cursor": body["next"], "limit": str(limit)}
        time.sleep(pause)


@pytest.fixture
def trader_orders(btc_usdt, usdt, api_as):
    """A trader with 9 resting bids and a read key."""
    trader = UserFactory()
    fund(trader, usdt, "1000000")
    orders = [place(trader, side="buy", price=str(100 + n), qty="0.01") for n in range(9)]
    return trader, orders, api_as(trader, "read")


def test_a_walk_returns_every_row_once_newest_first(trader_orders):
    _, orders, client = trader_orders

    rows = walk(client, "/api/v1/orders/", limit=4)

    assert [row["id"] for row in rows] == [order.id for order in reversed(orders)]


def test_without_cursor_or_paginate_the_plain_list_stays(trader_orders):
    _, orders, client = trader_orders

    response = client.get("/api/v1/orders/", {"limit": "2"})

    assert [row["id"] for row in response.json()] == [orders[-1].id, orders[-2].id]


def test_a_last_full_page_is_followed_by_an_empty_one(trader_orders):
    _, orders, client = trader_orders

    first = client.get("/api/v1/orders/", {"paginate": "1", "limit": "9"}).json()
    assert len(first["results"]) == 9 and first["next"]
    assert client.get("/api/v1/orders/", {"cursor": first["next"]}).json() == {"results": [], "next": None}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/api/v1/orders/", "/api/v1/trades/"])
def test_a_walk_sees_every_earlier_row_exactly_once_while_rows_are_inserted(btc_usdt, btc, usdt, key_for, path):
    """A walker pages through the trader's orders (id keyset) or fills (time keyset) while another
    thread keeps adding to them: every row there at the start appears once, no row twice, in order."""
    trader, buyer = UserFactory(), UserFactory()
    fund(trader, usdt, "1000000")
    fund(trader, btc, "10")
    fund(buyer, usdt, "1000000")
    for _ in range(60):
        place(trader, side="sell", price="100", qty="0.01")
    for _ in range(20):
        place(buyer, side="buy", price="100", qty="0.01")  # 20 fills of the trader's asks
    if path == "/api/v1/orders/":
        before = set(Order.objects.filter(user=trader).values_list("id", flat=True))
    else:
        before = set(Trade.objects.values_list("id", flat=True))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key_for(trader, 'read')}")
    done = threading.Event()

    def insert() -> int:
        placed = 0
        while not done.is_set():
            place(buyer, side="buy", price="100", qty="0.01")  # a new fill, and for the list of
            place(trader, side="buy", price="50", qty="0.02")  # orders a new order, at once
            placed += 1
        return placed

    def walk_then_stop():
        try:
            time.sleep(0.05)
            return walk(client, path, limit=3, pause=0.01)
        finally:
            done.set()

    placed, rows = run_concurrently([insert, walk_then_stop])

    assert not isinstance(rows, Exception), rows
    assert placed > 3  # the walk (10 pages or more, 10 ms apart) ran while rows were being added
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids))  # no row twice
    assert before <= set(ids)  # every earlier row
    if path == "/api/v1/orders/":
        assert ids == sorted(ids, reverse=True)
    else:
        keys = [(row["time"], *map(int, row["id"].split("-"))) for row in rows]
        assert keys == sorted(keys, reverse=True)


def test_a_tampered_cursor_is_refused(trader_orders):
    _, _, client = trader_orders
    cursor = client.get("/api/v1/orders/", {"paginate": "1", "limit": "2"}).json()["next"]
    value, signature = cursor.split(":", 1)

    for forged in (
        f"{value[:-1]}{'A' if value[-1] != 'A' else 'B'}:{signature}",  # another keyset, same signature
        f"{value}:{signature[:-1]}{'A' if signature[-1] != 'A' else 'B'}",
        _cursor_encode((1,), salt="not the server's"),
        "garbage",
    ):
        response = client.get("/api/v1/orders/", {"cursor": forged})
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_request"
        assert list(response.json()["error"]["fields"]) == ["cursor"]


def test_a_cursor_of_another_user_or_list_is_refused(trader_orders, api_as):
    trader, _, client = trader_orders
    cursor = client.get("/api/v1/orders/", {"paginate": "1", "limit": "2"}).json()["next"]
    other = api_as(UserFactory(), "read")

    assert other.get("/api/v1/orders/", {"cursor": cursor}).json()["error"]["fields"] == {
        "cursor": "Not a valid cursor."
    }
    assert client.get("/api/v1/withdrawals/", {"cursor": cursor}).status_code == 400
    assert client.get("/api/v1/orders/", {"cursor": cursor}).status_code == 200


def test_start_and_end_bound_the_time(trader_orders):
    _, orders, client = trader_orders

    def ids(**query):
        return [row["id"] for row in client.get("/api/v1/orders/", query).json()]

    start, end = orders[2].created_at, orders[5].created_at
    assert ids(start=start.isoformat(), end=end.isoformat()) == [orders[4].id, orders[3].id, orders[2].id]
    assert ids(start=(orders[8].created_at + timedelta(microseconds=1)).isoformat()) == []
    naive_utc = orders[8].created_at.replace(tzinfo=None).isoformat()  # no offset: UTC
    assert ids(start=naive_utc) == [orders[8].id]
    # An offset PostgreSQL would refuse (beyond 15:59) is the same instant in UTC, not a 500.
    far_east = orders[8].created_at.astimezone(timezone(timedelta(hours=20, minutes=54))).isoformat()
    assert ids(start=far_east) == [orders[8].id]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"start": "yesterday"}, "start"),
        ({"end": "2026-13-01T00:00:00Z"}, "end"),
        ({"start": "2026-12-01T12:00:00Z", "end": "2026-12-01T12:00:00Z"}, "end"),
        ({"start": "0001-01-01T00:00:00+05:00"}, "start"),
        ({"paginate": "yes"}, "paginate"),
        ({"limit": "0"}, "limit"),
    ],
)
def test_bad_list_parameters_are_400_naming_them(trader_orders, query, field):
    _, _, client = trader_orders

    response = client.get("/api/v1/orders/", query)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert list(response.json()["error"]["fields"]) == [field]


def _concrete(path: str, order_id: int) -> str:
    """``path`` of the schema with its parameters filled in: the BTC-USDT market, USDT, the order ``order_id``."""
    return path.replace("{symbol}", "BTC-USDT").replace("{asset}", "USDT").replace("{id}", str(order_id))


def _get_operations() -> list[str]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return sorted(path for path, item in schema["paths"].items() if "get" in item)


@pytest.mark.parametrize("path", _get_operations())
def test_an_unknown_query_parameter_is_refused_on_every_get(trader_orders, path):
    trader, orders, client = trader_orders
    concrete = _concrete(path, orders[0].id)

    response = client.get(concrete, {"limt": "5", "interval": "1m"} if "candles" in path else {"limt": "5"})

    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "invalid_request",
        "message": "Unknown query parameter: limt.",
        "fields": {"limt": "Unknown parameter."},
    }


@pytest.mark.parametrize("path", _get_operations())
@pytest.mark.parametrize("value", ["xml", "api", "json"])
def test_format_is_refused_as_a_parameter_naming_it_on_every_get(trader_orders, path, value):
    """``?format=xml`` (and ``api``) were a 404 ``not_found`` with no field: DRF's negotiation, not the view."""
    trader, orders, client = trader_orders
    concrete = _concrete(path, orders[0].id)
    query = {"format": value, "interval": "1m"} if "candles" in path else {"format": value}

    response = client.get(concrete, query)

    assert response.status_code == 400
    assert (response.json()["error"]["code"], list(response.json()["error"]["fields"])) == (
        "invalid_request",
        ["format"],
    )


def test_the_schema_is_still_served_as_json_on_request():
    response = APIClient().get("/api/schema/", {"format": "json"})

    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")


@pytest.mark.parametrize("path", _get_operations())
def test_a_query_parameter_given_twice_is_refused_on_every_get(trader_orders, path):
    trader, orders, client = trader_orders
    concrete = _concrete(path, orders[0].id)

    response = client.get(f"{concrete}?limit=5&limit=6")

    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "duplicate_field",
        "message": "Duplicate field: limit (give each once).",
        "fields": {"limit": "Given more than once."},
    }


def test_a_get_of_a_path_without_one_stays_a_405(trader_orders, api_as):
    trader, _, _ = trader_orders

    response = api_as(trader, "withdraw").get("/api/v1/withdrawals/1/", {"limt": "5"})

    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
