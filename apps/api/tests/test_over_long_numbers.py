"""A number the API cannot hold, in a query parameter or the URL path, is a 4xx naming it, never a 500.

A review found ``int()`` refusing more than 4300 digits (Python's limit on reading an int, ``ValueError``) and a
Unicode digit such as ``²`` (which ``str.isdigit()`` admits) behind ``limit`` and the path ids: 500
``internal_error``. A number above PostgreSQL's bigint is refused the same way, before the database.
"""

import pytest
from drf_spectacular.generators import SchemaGenerator

from apps.ledger.tests.factories import UserFactory

OVER_LONG = [
    "9" * 4301,  # int() refuses it: "Exceeds the limit (4300 digits) for integer string conversion"
    "1" + "0" * 5000,
    "²",  # isdigit(), yet int() cannot read it
    "9223372036854775808",  # 2**63: above a bigint
    "99999999999999999999",
]


def _operations() -> list[tuple[str, str, dict]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [(path, method, op) for path, item in schema["paths"].items() for method, op in item.items()]


def _parameters(op: dict, where: str) -> set[str]:
    return {parameter["name"] for parameter in op.get("parameters", []) if parameter["in"] == where}


WITH_LIMIT = sorted(
    path for path, method, op in _operations() if method == "get" and "limit" in _parameters(op, "query")
)
WITH_ID = sorted(
    (method, path)
    for path, method, op in _operations()
    if _parameters(op, "path") & {"id", "height"}  # object ids; {symbol} and {asset} are names
)


def test_the_routes_of_the_review_are_covered():
    assert {"/api/v1/orders/", "/api/v1/withdrawals/", "/api/v1/markets/{symbol}/trades/"} <= set(WITH_LIMIT)
    assert {"/api/v1/markets/{symbol}/depth/", "/api/v1/markets/{symbol}/candles/"} <= set(WITH_LIMIT)
    assert {("get", "/api/v1/orders/{id}/"), ("get", "/api/v1/ledger/entries/{id}/proof/")} <= set(WITH_ID)
    assert ("get", "/api/v1/proofs/journal/blocks/{height}/") in WITH_ID


@pytest.fixture
def client(btc_usdt, api_as):
    return api_as(UserFactory(), "read", "trade", "withdraw")


@pytest.mark.parametrize("path", WITH_LIMIT)
@pytest.mark.parametrize("limit", OVER_LONG, ids=lambda value: f"{value[:12]}({len(value)})")
def test_an_over_long_limit_is_a_400_naming_it(client, path, limit):
    query = {"limit": limit, "interval": "1m"} if "candles" in path else {"limit": limit}

    response = client.get(path.replace("{symbol}", "BTC-USDT"), query)

    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["code"] == "invalid_request"
    assert list(response.json()["error"]["fields"]) == ["limit"]


@pytest.mark.parametrize(("method", "path"), WITH_ID)
@pytest.mark.parametrize("number", OVER_LONG, ids=lambda value: f"{value[:12]}({len(value)})")
def test_an_over_long_id_in_the_path_is_a_404(client, method, path, number):
    """As an object that does not exist: 404 ``not_found``."""
    url = path.replace("{id}", number).replace("{height}", number)

    response = getattr(client, method)(url)

    assert response.status_code == 404, response.content[:300]
    assert response.json()["error"]["code"] == "not_found"


def test_a_limit_with_leading_zeros_is_still_read(client):
    response = client.get("/api/v1/markets/BTC-USDT/trades/", {"limit": "0" * 30 + "5"})
    assert response.status_code == 200
