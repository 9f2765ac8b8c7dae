"""Every endpoint: authentication, the scope it needs (issue 8: scopes enforced on every endpoint), throttles.

``ENDPOINTS`` lists every operation of the schema with the scope it needs; a new operation
that is not listed fails :func:`test_the_table_covers_every_operation_of_the_schema`.
"""

from decimal import Decimal

import pytest
from django.core.cache import cache
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from apps.accounts.enrolment import second_factor_enrol
from apps.accounts.models import Scope
from apps.accounts.services import api_key_create
from apps.accounts.tests.otp import totp_code
from apps.ledger.models import Posting
from apps.ledger.seal.services import journal_seal
from apps.ledger.tests.factories import AssetFactory, UserFactory, fund
from apps.orders.models import FeeSchedule, Order, OrderStatus
from apps.orders.services import market_create, order_place
from apps.proofs.services import liabilities_snapshot_take
from apps.streams.services import stream_token_create
from apps.wallets.custody.simnet import new_address
from apps.wallets.models import Withdrawal, WithdrawalAddress, WithdrawalStatus
from apps.wallets.services import withdrawal_request
from apps.wallets.tests.factories import book_address

ADDRESS = new_address()
OTHER_ADDRESS = new_address()

# (method, path in the schema, scope needed; None: public)
ENDPOINTS = [
    ("post", "/api/v1/auth/token/", None),
    ("get", "/api/v1/assets/", None),
    ("get", "/api/v1/markets/", None),
    ("get", "/api/v1/markets/{symbol}/depth/", None),
    ("get", "/api/v1/markets/{symbol}/trades/", None),
    ("get", "/api/v1/markets/{symbol}/candles/", None),
    ("get", "/api/v1/markets/{symbol}/ticker/", None),
    ("get", "/api/v1/tickers/", None),
    ("get", "/api/v1/time/", None),
    ("get", "/api/v1/balances/", "read"),
    ("get", "/api/v1/orders/", "read"),
    ("post", "/api/v1/orders/", "trade"),
    ("get", "/api/v1/orders/{id}/", "read"),
    ("delete", "/api/v1/orders/{id}/", "trade"),
    ("get", "/api/v1/trades/", "read"),
    ("get", "/api/v1/deposit-address/{asset}/", "read"),
    ("get", "/api/v1/deposits/", "read"),
    ("get", "/api/v1/withdrawals/", "read"),
    ("post", "/api/v1/withdrawals/", "withdraw"),
    ("delete", "/api/v1/withdrawals/{id}/", "withdraw"),
    ("get", "/api/v1/ledger/entries/", "read"),
    ("get", "/api/v1/withdrawal-addresses/", "read"),
    ("post", "/api/v1/withdrawal-addresses/", "withdraw"),
    ("delete", "/api/v1/withdrawal-addresses/{id}/", "withdraw"),
    ("post", "/api/v1/account/otp/", "withdraw"),
    ("post", "/api/v1/account/otp/confirm/", "withdraw"),
    ("get", "/api/v1/ledger/entries/{id}/proof/", "read"),
    ("get", "/api/v1/proofs/keys/", None),
    ("get", "/api/v1/proofs/journal/head/", None),
    ("get", "/api/v1/proofs/journal/blocks/{height}/", None),
    ("get", "/api/v1/proofs/liabilities/", None),
    ("get", "/api/v1/proofs/liabilities/latest/", "read"),
    ("get", "/api/v1/proofs/liabilities/{snapshot_id}/proof/", "read"),
    ("post", "/api/v1/stream-token/", "read"),
    ("put", "/api/v1/stream-token/", "read"),
    ("delete", "/api/v1/stream-token/", "read"),
]
SCOPED = [endpoint for endpoint in ENDPOINTS if endpoint[2]]
BODIES = {
    ("post", "/api/v1/auth/token/"): {"username": "trader", "password": "correct horse battery staple"},
    ("post", "/api/v1/orders/"): {
        "market": "BTC-USDT",
        "side": "buy",
        "type": "limit",
        "price": "50000",
        "qty": "0.01",
    },
    ("post", "/api/v1/withdrawals/"): {"asset": "USDT", "amount": "10", "address": ADDRESS},
    ("get", "/api/v1/markets/{symbol}/candles/"): {"interval": "1h"},  # a GET's data is its query
    ("post", "/api/v1/withdrawal-addresses/"): {"asset": "USDT", "address": OTHER_ADDRESS},
}


@pytest.fixture
def world(db):
    """A trader with an open order and a withdrawal awaiting approval on a BTC-USDT market."""
    usdt = AssetFactory(
        code="USDT",
        decimals=6,
        min_withdrawal=Decimal(1),
        withdrawal_auto_approve_limit=Decimal(50),
        withdrawal_daily_limit=Decimal(10000),
    )
    btc = AssetFactory(code="BTC", decimals=8)
    FeeSchedule.objects.update_or_create(
        is_default=True, defaults={"name": "default", "maker_rate": Decimal("0.001"), "taker_rate": Decimal("0.001")}
    )
    market_create(
        base=btc,
        quote=usdt,
        tick_size=Decimal("0.01"),
        step_size=Decimal("0.0001"),
        min_qty=Decimal("0.0001"),
        max_qty=Decimal(1000),
    )
    trader = UserFactory(username="trader")
    fund(trader, usdt, "10000")
    order = order_place(user_id=trader.id, market="BTC-USDT", side="buy", price="40000", qty="0.01")
    entry = book_address(trader, usdt, ADDRESS)
    withdrawal = withdrawal_request(user_id=trader.id, asset_code="USDT", amount="100", address=ADDRESS)
    assert withdrawal.status == WithdrawalStatus.AWAITING_APPROVAL
    second_factor_enrol(user_id=trader.id)  # an authenticator waiting for its confirmation
    stream_key = stream_token_create(user_id=trader.id)[1]
    journal_seal()  # so the proof endpoints have a block, an entry proof and a liabilities snapshot to serve
    snapshot = liabilities_snapshot_take()
    entry_id = Posting.objects.filter(account__owner=trader).order_by("id").first().entry_id
    return {
        "trader": trader,
        "order": order,
        "withdrawal": withdrawal,
        "entry": entry,
        "entry_id": entry_id,
        "stream_key": stream_key,
        "snapshot_id": snapshot.id,
    }


def call(client: APIClient, method: str, path: str, world: dict):
    concrete = (
        path.replace("{symbol}", "BTC-USDT")
        .replace("{asset}", "USDT")
        .replace("orders/{id}", f"orders/{world['order'].id}")
        .replace("withdrawals/{id}", f"withdrawals/{world['withdrawal'].id}")
        .replace("withdrawal-addresses/{id}", f"withdrawal-addresses/{world['entry'].id}")
        .replace("entries/{id}", f"entries/{world['entry_id']}")
        .replace("{height}", "0")
        .replace("{snapshot_id}", str(world["snapshot_id"]))
    )
    body = BODIES.get((method, path))
    if path == "/api/v1/account/otp/confirm/":
        body = {"otp": totp_code(TOTPDevice.objects.get(user=world["trader"], confirmed=False))}
    if path == "/api/v1/account/otp/":  # replacing a second factor needs a current code (a withdraw key has one)
        confirmed = TOTPDevice.objects.filter(user=world["trader"], confirmed=True).first()
        body = {"otp": totp_code(confirmed)} if confirmed else {}
    if path == "/api/v1/stream-token/" and method in ("put", "delete"):
        body = {"token": world["stream_key"]}  # the trader's own stream key
    return getattr(client, method)(concrete, body, format="json")


def nothing_changed(world: dict) -> bool:
    return (
        Order.objects.count() == 1
        and Order.objects.get().status == OrderStatus.OPEN
        and Withdrawal.objects.count() == 1
        and Withdrawal.objects.get().status == WithdrawalStatus.AWAITING_APPROVAL
        and list(WithdrawalAddress.objects.values_list("address", flat=True)) == [ADDRESS]
        # the authenticator being enrolled is still waiting (keys with the withdraw scope come with one of their own)
        and TOTPDevice.objects.filter(user=world["trader"], confirmed=False).count() == 1
        and not StaticDevice.objects.exists()  # confirming an enrolment makes the recovery codes
    )


def test_the_table_covers_every_operation_of_the_schema():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = {(method, path) for path, item in schema["paths"].items() for method in item}
    assert operations == {(method, path) for method, path, _ in ENDPOINTS}


@pytest.mark.parametrize(("method", "path", "scope"), SCOPED, ids=[f"{m} {p}" for m, p, _ in SCOPED])
def test_without_credentials_scoped_endpoints_are_401(world, method, path, scope):
    response = call(APIClient(), method, path, world)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response.headers["WWW-Authenticate"] == "Token"
    assert nothing_changed(world)


@pytest.mark.parametrize(("method", "path", "scope"), SCOPED, ids=[f"{m} {p}" for m, p, _ in SCOPED])
def test_a_key_with_every_other_scope_is_403_and_changes_nothing(world, api_as, method, path, scope):
    others = [other for other in Scope.values if other != scope]

    response = call(api_as(world["trader"], *others), method, path, world)

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert f"the {scope} scope" in response.json()["error"]["message"]
    assert nothing_changed(world)


@pytest.mark.parametrize(("method", "path", "scope"), ENDPOINTS, ids=[f"{m} {p}" for m, p, _ in ENDPOINTS])
def test_the_scope_alone_is_enough(world, api_as, method, path, scope):
    client = api_as(world["trader"], scope) if scope else APIClient()

    response = call(client, method, path, world)

    assert 200 <= response.status_code < 300, response.json()


def test_a_read_key_cannot_trade_and_a_trade_key_cannot_withdraw(world, api_as):
    order_body = BODIES[("post", "/api/v1/orders/")]
    withdrawal_body = BODIES[("post", "/api/v1/withdrawals/")]

    assert api_as(world["trader"], "read").post("/api/v1/orders/", order_body, format="json").status_code == 403
    assert (
        api_as(world["trader"], "trade").post("/api/v1/withdrawals/", withdrawal_body, format="json").status_code == 403
    )
    assert nothing_changed(world)


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/nothing/",
        "/api/v1/orders/a%2Fb/",
        "/api/v1/markets/a%2Fb/depth/",
        "/api/v1/markets/%00/trades/",
        "/api/v1/deposit-address/%00/",
        "/api/v1/withdrawals/-3/",
    ],
)
def test_paths_that_cannot_exist_are_404_in_the_error_shape(world, api_as, path):
    response = api_as(world["trader"], *Scope.values).get(path)
    assert response.status_code in (404, 405)
    assert response.headers["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] in ("not_found", "method_not_allowed")


def test_a_path_without_its_last_slash_is_a_404_that_says_so(world, api_as):
    response = api_as(world["trader"], "read").get("/api/v1/orders")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "No such API path: paths end with a slash."


@pytest.mark.parametrize(
    "query", ["ledger/entries/?asset=%00", "orders/?market=%00", "trades/?market=%00", "orders/?status=%00"]
)
def test_query_parameters_no_name_can_have_are_400(world, api_as, query):
    response = api_as(world["trader"], "read").get(f"/api/v1/{query}")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


# Throttles ------------------------------------------------------------------------------------------------


@pytest.fixture
def low_rates(settings):
    def set_rates(**rates):
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], **rates},
        }

    return set_rates


def test_requests_are_throttled_per_api_key(db, user, low_rates):
    low_rates(key="3/min")
    clients = []
    for _ in range(2):
        key, raw, _secret = api_key_create(user_id=user.id, name="bot", scopes=["read"])
        cache.delete(f"throttle:key:key{key.id}")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
        clients.append(client)

    first = [clients[0].get("/api/v1/balances/").status_code for _ in range(4)]

    assert first == [200, 200, 200, 429]
    limited = clients[0].get("/api/v1/balances/")
    assert limited.json()["error"]["code"] == "rate_limited"
    assert int(limited.headers["Retry-After"]) > 0
    assert clients[1].get("/api/v1/balances/").status_code == 200


def test_requests_are_throttled_per_ip_also_without_credentials(db, low_rates):
    low_rates(ip="2/min")
    addresses = ["198.51.100.20", "198.51.100.21"]
    cache.delete_many([f"throttle:ip:{address}" for address in addresses])
    client = APIClient()

    statuses = [client.get("/api/v1/markets/", REMOTE_ADDR=addresses[0]).status_code for _ in range(3)]

    assert statuses == [200, 200, 429]
    assert client.get("/api/v1/markets/", REMOTE_ADDR=addresses[1]).status_code == 200
