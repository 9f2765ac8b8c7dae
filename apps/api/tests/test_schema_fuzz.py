"""Schemathesis over the whole OpenAPI schema: no 500, no response that breaks the schema.

It generates requests for every operation (valid and invalid), sends them to the
real Django application in-process (WSGI) against the real database, and checks
the answers. New endpoints are covered as soon as they are in the schema.

The database holds a small exchange (assets, a market with a book and trades, the
trader's open order, fill, deposit and withdrawals), and about half of the generated
market symbols, asset codes, ids and bodies are pointed at those real objects, so that
the operations run their real paths (placing and cancelling orders, withdrawing), not
only their "not found" answers.
"""

import zlib
from decimal import Decimal

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from apps.ledger.models import Posting
from apps.ledger.seal.services import journal_seal
from apps.ledger.tests.factories import AssetFactory, UserFactory, fund
from apps.orders.models import FeeSchedule
from apps.orders.services import market_create, order_place
from apps.proofs.services import liabilities_snapshot_take
from apps.wallets.custody.simnet import new_address
from apps.wallets.services import withdrawal_request
from apps.wallets.tests.factories import book_address, deposit_through_custody


@pytest.fixture
def exchange(db, key_for) -> dict:
    """A funded trader (a key of every scope) on a market with a book, and what the fuzzer may aim at."""
    usdt = AssetFactory.create(
        code="USDT",
        name="Tether",
        decimals=6,
        withdrawal_fee=Decimal("0.5"),
        min_withdrawal=Decimal(1),
        withdrawal_auto_approve_limit=Decimal(1000),
        withdrawal_daily_limit=Decimal(100000),
    )
    btc = AssetFactory.create(
        code="BTC",
        name="Bitcoin",
        decimals=8,
        withdrawal_fee=Decimal("0.0001"),
        min_withdrawal=Decimal("0.001"),
        withdrawal_auto_approve_limit=Decimal(1),
        withdrawal_daily_limit=Decimal(10),
    )
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
        min_notional=Decimal(1),
    )
    trader, maker = UserFactory.create(), UserFactory.create()
    fund(trader, usdt, "100000")
    fund(trader, btc, "10")
    fund(maker, usdt, "100000")
    fund(maker, btc, "10")
    deposit_through_custody(trader, btc, "0.5")
    for side, price in (("sell", "60000"), ("sell", "61000"), ("buy", "50000"), ("buy", "49000")):
        order_place(user_id=maker.id, market="BTC-USDT", side=side, price=price, qty="0.5")
    order_place(user_id=trader.id, market="BTC-USDT", side="buy", type="market", qty="0.01")  # a fill
    open_order = order_place(user_id=trader.id, market="BTC-USDT", side="buy", price="40000", qty="0.01")
    address = new_address()
    book_address(trader, usdt, address)
    withdrawal_request(user_id=trader.id, asset_code="USDT", amount="10", address=address)  # approved
    pending = withdrawal_request(user_id=trader.id, asset_code="USDT", amount="2000", address=address)
    journal_seal()  # the proof endpoints answer with real blocks, entry proofs and a liabilities snapshot
    liabilities_snapshot_take()
    sealed_entry = Posting.objects.filter(account__owner=trader).order_by("id").values_list("entry_id", flat=True)[0]
    return {
        "headers": {"Authorization": f"Token {key_for(trader, 'read', 'trade', 'withdraw')}"},
        "path": {"symbol": "BTC-USDT", "asset": "BTC", "height": "0"},
        "ids": {
            "/api/v1/orders/{id}/": open_order.id,
            "/api/v1/withdrawals/{id}/": pending.id,
            "/api/v1/ledger/entries/{id}/proof/": sealed_entry,
        },
        "query": {"market": "BTC-USDT", "asset": "USDT", "status": "open", "interval": "1m", "paginate": "1"},
        # Bodies: a limit order that rests between the best bid and ask, a withdrawal to a valid address.
        "body": {
            "market": "BTC-USDT",
            "type": "limit",
            "price": "55000.00",
            "qty": "0.0100",
            "quote_qty": None,
            "time_in_force": None,
            "asset": "USDT",
            "amount": "1.5",
            "address": address,
        },
    }


@pytest.fixture
def live_exchange(exchange):
    """The exchange, with the test's connection (and its transaction) kept across requests as Django's test
    client does. Set up after the exchange is built: the test client that delivered its deposit callbacks
    connects Django's connection-closing handlers again when it is done."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield exchange
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def aim_at_real_objects(case, real: dict) -> None:
    """Point about half of the generated path and query parameters, and half of the bodies, at real objects.

    Each path or query parameter is replaced on its own; a body has all its known fields replaced
    at once (an order needs its market, type, price and quantity to agree). The choice comes from
    bits of a checksum of the whole case, so the same case is always changed the same way
    (hypothesis can replay and shrink it).
    """
    bits = zlib.crc32(repr((case.path_parameters, case.query, case.body, case.headers)).encode())
    targets = [("path", name) for name in sorted(case.path_parameters or {})]
    targets += [("query", name) for name in sorted(case.query or {})]
    for bit, (where, name) in enumerate(targets + [("body", None)]):
        if not bits >> bit & 1:
            continue
        if where == "path" and name == "id" and case.operation.path in real["ids"]:
            case.path_parameters[name] = real["ids"][case.operation.path]
        elif where == "path" and name in real["path"]:
            case.path_parameters[name] = real["path"][name]
        elif where == "query" and name in real["query"]:
            case.query[name] = real["query"][name]
        elif where == "body" and isinstance(case.body, dict):
            case.body.update({key: value for key, value in real["body"].items() if key in case.body})


schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors_and_responses_match_the_schema(case, live_exchange):
    aim_at_real_objects(case, live_exchange)
    case.call_and_validate(
        headers=live_exchange["headers"],
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance],
    )
