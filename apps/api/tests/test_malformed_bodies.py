"""Bodies no client should send are 4xx in the API's error shape, never a 500 (hole 6)."""

import json
from decimal import Decimal

import pytest
from django.test import Client

from apps.orders.models import Order
from apps.orders.tests.helpers import balance
from exchange.api_urls import urlpatterns

NESTED = "[" * 3000 + "]" * 3000


def post_paths() -> list[str]:
    """Every API path that takes a POST (API.md), with a sample id where the route has a parameter."""
    return [
        "/api/v1/auth/token/",
        "/api/v1/orders/",
        "/api/v1/withdrawals/",
        "/api/v1/withdrawal-addresses/",
        "/api/v1/account/otp/",
        "/api/v1/account/otp/confirm/",
        "/api/v1/stream-token/",
    ]


def test_the_list_of_post_paths_covers_every_post_route():
    """Every view under /api/v1/ with a post method is in :func:`post_paths`."""
    posting = {
        f"/api/v1/{pattern.pattern}"
        for pattern in urlpatterns
        if hasattr(getattr(pattern.callback, "view_class", None), "post")
    }
    assert posting == set(post_paths())


@pytest.mark.parametrize("path", post_paths())
@pytest.mark.parametrize("body", [NESTED, '{"a": ' * 3000 + "1" + "}" * 3000])
def test_a_deeply_nested_json_body_is_a_400(db, api_as, user, path, body):
    client = api_as(user, "read", "trade", "withdraw")
    response = client.generic("POST", path, body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize("path", post_paths())
def test_a_deeply_nested_body_with_an_idempotency_key_is_a_400(db, api_as, user, path):
    client = api_as(user, "read", "trade", "withdraw")
    response = client.generic("POST", path, NESTED, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k1")
    assert response.status_code == 400


@pytest.mark.parametrize("path", post_paths())
def test_a_body_over_the_upload_limit_is_a_413_in_the_error_shape(db, api_as, user, path, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    client = api_as(user, "read", "trade", "withdraw")
    body = json.dumps({"username": "x" * 20_000, "password": "y"})

    response = client.generic("POST", path, body, content_type="application/json")

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def test_a_body_over_the_upload_limit_is_a_413_without_credentials_too(db, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = Client().post("/api/v1/auth/token/", "x" * 20_000, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/markets/BTC%00USDT/depth/",
        "/api/v1/markets/%00/trades/",
        "/api/v1/deposit-address/%00/",
        "/api/v1/orders/%00/",
        "/api/v1/withdrawals/1%00/",
        "/api/v1/orders/?market=BTC%00USDT",
        "/api/v1/trades/?market=%00",
        "/api/v1/ledger/entries/?asset=%00",
    ],
)
def test_a_nul_byte_in_a_url_is_a_4xx(db, api_as, user, path):
    response = api_as(user, "read").get(path)
    assert 400 <= response.status_code < 500
    assert "code" in response.json()["error"]


@pytest.mark.parametrize("path", post_paths())
def test_a_json_key_given_twice_is_refused_naming_it(db, api_as, user, path):
    client = api_as(user, "read", "trade", "withdraw")
    body = '{"market": "BTC-USDT", "qty": "0.01", "qty": "50", "side": "buy", "side": "sell"}'

    response = client.generic("POST", path, body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "duplicate_field",
        "message": "Duplicate fields: qty, side (give each once).",
        "fields": {"qty": "Given more than once.", "side": "Given more than once."},
    }


def test_a_key_given_twice_in_a_nested_object_is_refused(db, api_as, user):
    body = '{"market": "BTC-USDT", "extra": {"a": 1, "a": 2}}'
    response = api_as(user, "trade").generic("POST", "/api/v1/orders/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"a": "Given more than once."}


# Every path whose POST reads a body (POST /stream-token/ takes none).
BODY_PATHS = [path for path in post_paths() if path != "/api/v1/stream-token/"]


@pytest.mark.parametrize("path", BODY_PATHS)
def test_an_unknown_body_field_is_refused_naming_each(db, api_as, user, path):
    client = api_as(user, "read", "trade", "withdraw")
    response = client.post(path, {"extra": 1, "timeInForce": "IOC"}, format="json")

    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "unknown_field",
        "message": "Unknown fields: extra, timeInForce.",
        "fields": {"extra": "Unknown field.", "timeInForce": "Unknown field."},
    }


@pytest.mark.parametrize(
    "path, body",
    [
        ("/api/v1/orders/", '{"market": "BTC-USDT", "side": "\\ud800", "type": "limit", "price": "1000", "qty": "1"}'),
        (
            "/api/v1/orders/",
            '{"market": "BTC-USDT", "side": "buy", "type": "limit", "price": "1000", "qty": "1", '
            '"time_in_force": "\\ud800"}',
        ),
        (
            "/api/v1/orders/",
            '{"market": "BTC-USDT", "side": "buy", "type": "limit", "price": "1000", "qty": "1", "stp": "\\ud800"}',
        ),
        (
            "/api/v1/orders/",
            '{"market": "BTC-USDT", "side": "buy", "type": "limit", "price": "1000", "qty": "1", "\\ud800": 1}',
        ),
        ("/api/v1/auth/token/", '{"username": "taker", "password": "x", "scopes": ["\\ud800"]}'),
    ],
)
def test_a_lone_surrogate_repeated_in_the_error_is_a_400_not_a_500(db, api_as, user, btc_usdt, path, body):
    """Break-it review: the error repeated the bad value, and encoding the answer failed on its lone surrogate."""
    client = api_as(user, "read", "trade")
    response = client.generic("POST", path, body, content_type="application/json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] in ("invalid_request", "unknown_field")
    assert "\ud800" not in json.dumps(error, ensure_ascii=False)
    assert "\ufffd" in json.dumps(error, ensure_ascii=False)
    assert Order.objects.count() == 0


def test_an_order_with_another_apis_field_names_is_refused_and_nothing_is_held(api_as, funded_user, btc_usdt):
    """Binance's ``timeInForce``/``postOnly``/``clientOrderId`` were ignored: the order rested as GTC, not post-only."""
    trader = funded_user(usdt="100")
    body = {
        "market": "BTC-USDT",
        "side": "buy",
        "type": "limit",
        "price": "1000",
        "qty": "0.01",
        "timeInForce": "IOC",
        "postOnly": True,
        "clientOrderId": "x1",
    }
    response = api_as(trader, "trade").post("/api/v1/orders/", body, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == dict.fromkeys(
        ["clientOrderId", "postOnly", "timeInForce"], "Unknown field."
    )
    assert not Order.objects.exists()
    assert balance(trader, btc_usdt.quote) == (Decimal("100"), Decimal("0"))
