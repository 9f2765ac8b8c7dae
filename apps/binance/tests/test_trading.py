"""Signed endpoints of /api/v3/: orders and account through our services, Binance's shapes and error codes."""

import hashlib
import hmac
import time
from datetime import timedelta
from decimal import Decimal
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.accounts.restrictions import account_trading_freeze, account_withdrawals_block
from apps.accounts.services import api_key_create
from apps.accounts.tests.otp import fresh_code
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.models import Command, Market, Order
from apps.orders.tests.helpers import balance, place
from apps.streams.events import BookChange, MarketInfo, execution_reports
from apps.streams.models import StreamEvent

pytestmark = pytest.mark.django_db


class Signer:
    """Signs requests as Binance's documentation does: HMAC-SHA256 hex over the query string (GET, DELETE)
    or the form body (POST), ``timestamp`` in ms."""

    def __init__(self, client, raw_key: str, secret: str):
        self.client, self.raw_key, self.secret = client, raw_key, secret

    def sign(self, params: dict, *, timestamp: int | None = None) -> str:
        params = {**params, "timestamp": timestamp if timestamp is not None else int(time.time() * 1000)}
        payload = urlencode(params)
        signature = hmac.new(self.secret.encode(), payload.encode(), hashlib.sha256).hexdigest()
        return f"{payload}&signature={signature}"

    def send(self, method: str, path: str, signed: str):
        url = f"/api/v3/{path}"
        headers = {"HTTP_X_MBX_APIKEY": self.raw_key}
        if method == "POST":
            return self.client.post(url, signed, content_type="application/x-www-form-urlencoded", **headers)
        return getattr(self.client, method.lower())(f"{url}?{signed}", **headers)

    def __call__(self, method: str, path: str, **params):
        return self.send(method, path, self.sign(params))


@pytest.fixture
def trader(client, btc_usdt, funded_user, signing_key):
    user = funded_user(usdt="100000", btc="1")
    return user, Signer(client, *signing_key(user, "read", "trade"))


@pytest.fixture
def maker(btc_usdt, funded_user):
    return funded_user(btc="2", usdt="100000")


def test_limit_buy_fills_against_the_book_full_response(trader, maker, btc, usdt):
    user, signed = trader
    place(maker, side="sell", price="59900", qty="0.2")
    response = signed(
        "POST",
        "order",
        symbol="BTCUSDT",
        side="BUY",
        type="LIMIT",
        timeInForce="GTC",
        quantity="0.5",
        price="60000",
        newClientOrderId="my-order-1",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    order = Order.objects.get(id=body["orderId"])
    assert (body["clientOrderId"], body["status"], body["type"], body["side"]) == (
        "my-order-1",
        "PARTIALLY_FILLED",
        "LIMIT",
        "BUY",
    )
    assert (body["origQty"], body["executedQty"], body["cummulativeQuoteQty"]) == (
        "0.50000000",
        "0.20000000",
        "11980.000000",
    )
    assert body["fills"] == [
        {
            "price": "59900.000000",
            "qty": "0.20000000",
            "commission": "0.00020000",
            "commissionAsset": "BTC",
            "tradeId": order.id * 10**6 + 1,
        }
    ]
    assert isinstance(body["transactTime"], int) and body["selfTradePreventionMode"] == "EXPIRE_TAKER"
    assert response.headers["X-MBX-ORDER-COUNT-10S"] and response.headers["X-MBX-ORDER-COUNT-1D"]
    # SCENARIOS.md S1 through this surface: 30,000 held, 11,980 spent, 18,020 still held.
    assert balance(user, usdt) == (Decimal("70000"), Decimal("18020"))


def test_get_cancel_and_the_order_is_gone_from_open_orders(trader):
    user, signed = trader
    placed = signed(
        "POST", "order", symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="GTC", quantity="0.1", price="50000"
    ).json()
    assert placed["status"] == "NEW" and placed["fills"] == []
    got = signed("GET", "order", symbol="BTCUSDT", origClientOrderId=placed["clientOrderId"]).json()
    assert (got["orderId"], got["status"], got["price"], got["isWorking"]) == (
        placed["orderId"],
        "NEW",
        "50000.000000",
        True,
    )
    assert [o["orderId"] for o in signed("GET", "openOrders", symbol="BTCUSDT").json()] == [placed["orderId"]]
    cancelled = signed("DELETE", "order", symbol="BTCUSDT", orderId=placed["orderId"]).json()
    assert (cancelled["status"], cancelled["origClientOrderId"]) == ("CANCELED", placed["clientOrderId"])
    assert signed("GET", "openOrders").json() == []
    again = signed("DELETE", "order", symbol="BTCUSDT", orderId=placed["orderId"])
    assert (again.status_code, again.json()["code"]) == (400, -2011)


def test_limit_maker_would_take_is_rejected_and_holds_nothing(trader, maker, usdt):
    user, signed = trader
    place(maker, side="sell", price="59900", qty="0.2")
    response = signed("POST", "order", symbol="BTCUSDT", side="BUY", type="LIMIT_MAKER", quantity="0.1", price="60000")
    assert response.status_code == 400
    assert response.json() == {"code": -2010, "msg": "Order would immediately match and take."}
    assert balance(user, usdt) == (Decimal("100000"), Decimal("0"))


def test_market_buy_by_quote_order_qty(trader, maker, btc):
    user, signed = trader
    place(maker, side="sell", price="50000", qty="1")
    body = signed("POST", "order", symbol="BTCUSDT", side="BUY", type="MARKET", quoteOrderQty="5000").json()
    assert (body["status"], body["type"], body["executedQty"], body["cummulativeQuoteQty"]) == (
        "FILLED",
        "MARKET",
        "0.10000000",
        "5000.000000",
    )
    assert body["origQuoteOrderQty"] == "5000.000000"
    assert balance(user, btc)[0] == Decimal("1.0999")  # 0.1 less the 0.0001 taker fee


def test_ioc_remainder_expires(trader, maker):
    _, signed = trader
    place(maker, side="sell", price="59900", qty="0.1")
    body = signed(
        "POST", "order", symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="IOC", quantity="0.3", price="60000"
    ).json()
    assert (body["status"], body["executedQty"]) == ("EXPIRED", "0.10000000")


def test_self_trade_prevention_expires_in_match(trader):
    user, signed = trader
    place(user, side="sell", price="59900", qty="0.1")
    body = signed(
        "POST",
        "order",
        symbol="BTCUSDT",
        side="BUY",
        type="LIMIT",
        timeInForce="GTC",
        quantity="0.1",
        price="60000",
        selfTradePreventionMode="EXPIRE_TAKER",
        newOrderRespType="RESULT",
    ).json()
    assert body["status"] == "EXPIRED_IN_MATCH" and "fills" not in body


def test_ack_response(trader):
    _, signed = trader
    body = signed(
        "POST",
        "order",
        symbol="BTCUSDT",
        side="SELL",
        type="LIMIT",
        timeInForce="GTC",
        quantity="0.1",
        price="70000",
        newOrderRespType="ACK",
    ).json()
    assert set(body) == {"symbol", "orderId", "orderListId", "clientOrderId", "transactTime"}


def test_order_test_judges_and_writes_nothing(trader, usdt):
    user, signed = trader
    ok = signed(
        "POST",
        "order/test",
        symbol="BTCUSDT",
        side="BUY",
        type="LIMIT",
        timeInForce="GTC",
        quantity="0.1",
        price="50000",
    )
    assert ok.status_code == 200 and ok.json() == {}
    poor = signed(
        "POST",
        "order/test",
        symbol="BTCUSDT",
        side="BUY",
        type="LIMIT",
        timeInForce="GTC",
        quantity="10",
        price="50000",
    )
    assert poor.json() == {"code": -2010, "msg": "Account has insufficient balance for requested action."}
    assert Order.objects.count() == 0 and balance(user, usdt) == (Decimal("100000"), Decimal("0"))


def test_order_test_in_sequencer_mode_judges_inline_and_hands_nothing_to_the_sequencer(trader, usdt, settings):
    """A test order handed to the sequencer as a command would have been placed for real once it ran."""
    user, signed = trader
    settings.ORDERS_ENGINE, settings.ORDERS_ENGINE_WAIT_SECONDS = "sequencer", 0.2
    order = {"symbol": "BTCUSDT", "side": "BUY", "type": "LIMIT", "timeInForce": "GTC", "price": "50000"}

    ok = signed("POST", "order/test", **order, quantity="0.1")
    poor = signed("POST", "order/test", **order, quantity="10")

    assert ok.status_code == 200 and ok.json() == {}
    assert poor.json() == {"code": -2010, "msg": "Account has insufficient balance for requested action."}
    assert not Command.objects.exists()
    assert Order.objects.count() == 0 and balance(user, usdt) == (Decimal("100000"), Decimal("0"))


def test_all_orders_my_trades_account(trader, maker):
    user, signed = trader
    place(maker, side="sell", price="59900", qty="0.2")
    first = signed(
        "POST", "order", symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="GTC", quantity="0.1", price="60000"
    ).json()
    second = signed(
        "POST", "order", symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="GTC", quantity="0.1", price="50000"
    ).json()
    assert [o["orderId"] for o in signed("GET", "allOrders", symbol="BTCUSDT").json()] == [
        first["orderId"],
        second["orderId"],
    ]
    assert [o["orderId"] for o in signed("GET", "allOrders", symbol="BTCUSDT", orderId=second["orderId"]).json()] == [
        second["orderId"]
    ]
    (trade,) = signed("GET", "myTrades", symbol="BTCUSDT").json()
    assert (trade["orderId"], trade["isBuyer"], trade["isMaker"], trade["commission"], trade["commissionAsset"]) == (
        first["orderId"],
        True,
        False,
        "0.00010000",
        "BTC",
    )
    account = signed("GET", "account").json()
    balances = {b["asset"]: (b["free"], b["locked"]) for b in account["balances"]}
    assert balances["USDT"] == ("89010.000000", "5000.000000")  # 5,990 spent, 5,000 held by the resting bid
    assert balances["BTC"] == ("1.09990000", "0.00000000")
    assert account["commissionRates"]["maker"] == "0.00100000" and account["makerCommission"] == 10
    assert (account["canTrade"], account["canWithdraw"], account["accountType"]) == (True, False, "SPOT")
    commission = signed("GET", "account/commission", symbol="BTCUSDT").json()
    assert commission["standardCommission"]["taker"] == "0.00100000"


@pytest.mark.parametrize("path", ["allOrders", "myTrades"])
def test_order_and_trade_history_take_at_most_24_hours_between_start_and_end(trader, maker, path):
    """Binance: "The time between startTime and endTime can't be longer than 24 hours" (-1127); a start after the
    end is an empty range."""
    user, signed = trader
    place(maker, side="sell", price="59900", qty="0.2")
    signed(
        "POST", "order", symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="GTC", quantity="0.1", price="60000"
    )
    now = int(time.time() * 1000)
    day = 24 * 3600 * 1000
    too_long = signed("GET", path, symbol="BTCUSDT", startTime=now - day - 1000, endTime=now + 1000)
    assert (too_long.status_code, too_long.json()) == (
        400,
        {"code": -1127, "msg": "More than 24 hours between startTime and endTime."},
    )
    within = signed("GET", path, symbol="BTCUSDT", startTime=now - day + 60_000, endTime=now + 60_000)
    assert within.status_code == 200 and len(within.json()) == 1
    reversed_range = signed("GET", path, symbol="BTCUSDT", startTime=now + 60_000, endTime=now - 60_000)
    assert (reversed_range.status_code, reversed_range.json()) == (200, [])


def test_history_windows_bound_the_times_they_show(trader, maker):
    """An order or trade shown at T (milliseconds, rounded) is found by [T, T] and by neither of the windows that
    end at T - 1 and start at T + 1, whatever its microseconds: a bot paging by time misses and repeats nothing."""
    user, signed = trader
    place(maker, side="sell", price="59900", qty="0.2")
    for price in ("60000", "59900", "50000"):
        signed(
            "POST", "order", symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="GTC", quantity="0.05", price=price
        )
    for path, shown, key in (("allOrders", "time", "orderId"), ("myTrades", "time", "id")):
        rows = signed("GET", path, symbol="BTCUSDT").json()
        assert len(rows) >= 2
        for row in rows:
            at = row[shown]

            def keys(start, end, path=path, key=key):
                return [r[key] for r in signed("GET", path, symbol="BTCUSDT", startTime=start, endTime=end).json()]

            assert row[key] in keys(at, at)
            assert row[key] not in keys(at - 60_000, at - 1) + keys(at + 1, at + 60_000)


def test_my_trades_by_order_id_is_the_users_own_order_only(trader, maker):
    user, signed = trader
    resting = place(maker, side="sell", price="59900", qty="0.2")
    mine = signed(
        "POST", "order", symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="GTC", quantity="0.1", price="60000"
    ).json()
    assert [t["orderId"] for t in signed("GET", "myTrades", symbol="BTCUSDT", orderId=mine["orderId"]).json()] == [
        mine["orderId"]
    ]
    assert signed("GET", "myTrades", symbol="BTCUSDT", orderId=resting.id).json() == []  # the maker's: not hers


def test_cancel_all_open_orders_on_a_symbol(trader, usdt):
    user, signed = trader
    for price in ("50000", "51000"):
        signed(
            "POST", "order", symbol="BTCUSDT", side="BUY", type="LIMIT", timeInForce="GTC", quantity="0.1", price=price
        )
    cancelled = signed("DELETE", "openOrders", symbol="BTCUSDT").json()
    assert [o["status"] for o in cancelled] == ["CANCELED", "CANCELED"]
    assert balance(user, usdt) == (Decimal("100000"), Decimal("0"))
    # Each answer's clientOrderId is its CANCELED report's c on the user stream (break-it review: a fresh id per
    # answer, found nowhere else).
    market = MarketInfo.of(Market.objects.select_related("base", "quote").get(symbol="BTC-USDT"))
    reports = [
        report
        for row in StreamEvent.objects.filter(kind="book").order_by("id")
        for _, report in execution_reports(market, BookChange(row.update_id, row.payload), 0)
        if report["x"] == "CANCELED"
    ]
    assert [(r["i"], r["c"]) for r in reports] == [(o["orderId"], o["clientOrderId"]) for o in cancelled]

    none_open = signed("DELETE", "openOrders", symbol="BTCUSDT")  # was 200 []: Binance answers -2011
    assert (none_open.status_code, none_open.json()) == (400, {"code": -2011, "msg": "Unknown order sent."})


ORDER = {"symbol": "BTCUSDT", "side": "BUY", "type": "LIMIT", "timeInForce": "GTC", "quantity": "0.1", "price": "50000"}


@pytest.mark.parametrize(
    ("change", "code", "msg_part"),
    [
        ({"price": "50000.0000001"}, -1111, "Precision"),
        ({"price": "50000.001"}, -1013, "PRICE_FILTER"),
        ({"quantity": "0.123456789"}, -1111, "Precision"),
        ({"price": "50000.10", "quantity": "0.00015"}, -1013, "LOT_SIZE"),
        ({"price": "1e5"}, -1100, "price"),
        ({"price": "-1"}, -1100, "price"),
        ({"price": "NaN"}, -1100, "price"),
        ({"price": "0"}, -1130, "price"),
        ({"quantity": "0.00001000"}, -1013, "LOT_SIZE"),
        ({"quantity": "2000"}, -1013, "LOT_SIZE"),
        ({"quantity": "0.0001", "price": "0.01"}, -1013, "NOTIONAL"),
        ({"quantity": "2", "price": "99999999999999999999.99"}, -1013, "NOTIONAL"),  # above maxNotional
        ({"quantity": "10"}, -2010, "insufficient balance"),
        ({"side": "BOTH"}, -1117, "side"),
        ({"type": "STOP_LOSS"}, -1116, "orderType"),
        ({"timeInForce": "GTD"}, -1115, "timeInForce"),
        ({"timeInForce": None}, -1102, "timeInForce"),
        ({"price": None}, -1102, "price"),
        ({"symbol": "ETHUSDT"}, -1121, "symbol"),
        ({"selfTradePreventionMode": "NONE"}, -2010, "self-trade prevention"),
        ({"selfTradePreventionMode": "SOMETIMES"}, -1130, "selfTradePreventionMode"),
        ({"newClientOrderId": "x" * 37}, -1100, "newClientOrderId"),
        ({"icebergQty": "0.01"}, -1104, "icebergQty"),
        ({"strategyId": "-1"}, -1100, "strategyId"),
        ({"strategyId": "x"}, -1100, "strategyId"),
        ({"strategyType": "999999"}, -1100, "strategyType"),
        ({"strategyType": str(2**31)}, -1100, "strategyType"),
        ({"type": "MARKET", "timeInForce": None, "price": None, "quantity": None}, -1102, "quoteOrderQty"),
        (
            {
                "type": "MARKET",
                "timeInForce": None,
                "price": None,
                "side": "SELL",
                "quantity": None,
                "quoteOrderQty": "5",
            },
            -1014,
            "combination",
        ),
        ({"type": "MARKET", "timeInForce": None}, -1106, "price"),
        ({"type": "LIMIT_MAKER"}, -1106, "timeInForce"),
    ],
)
def test_bad_orders_get_binance_codes_and_leave_nothing(trader, usdt, change, code, msg_part):
    user, signed = trader
    params = {name: value for name, value in {**ORDER, **change}.items() if value is not None}
    response = signed("POST", "order", **params)
    assert response.status_code == 400
    assert response.json()["code"] == code and msg_part in response.json()["msg"]
    assert Order.objects.count() == 0 and balance(user, usdt) == (Decimal("100000"), Decimal("0"))


def test_an_order_tagged_with_a_strategy_is_placed(trader):
    """Break-it review: ``strategyId`` and ``strategyType``, which Binance takes on any order, were refused (-1104)."""
    user, signed = trader
    response = signed("POST", "order", **ORDER, strategyId="1", strategyType="1000000")

    assert response.status_code == 200, response.json()
    assert Order.objects.get(id=response.json()["orderId"]).user_id == user.id


def test_cancel_by_orig_client_order_id_answers_the_cancelled_order_then_2011(trader):
    user, signed = trader
    signed("POST", "order", **ORDER)
    placed = signed("POST", "order", **{**ORDER, "price": "49000", "newClientOrderId": "bot-7"}).json()

    cancelled = signed("DELETE", "order", symbol="BTCUSDT", origClientOrderId="bot-7", newClientOrderId="undo-7").json()

    assert (cancelled["orderId"], cancelled["status"]) == (placed["orderId"], "CANCELED")
    assert (cancelled["origClientOrderId"], cancelled["clientOrderId"]) == ("bot-7", "undo-7")
    assert Order.objects.filter(user=user, status="open").count() == 1  # only the one named
    again = signed("DELETE", "order", symbol="BTCUSDT", origClientOrderId="bot-7")
    assert (again.status_code, again.json()["code"]) == (400, -2011)


@pytest.mark.parametrize("client_order_id", ["é-1", "a b", "<script>alert(1)</script>", "x" * 64])
def test_an_order_placed_through_v1_is_found_and_cancelled_by_its_client_order_id(trader, client_order_id):
    """``/api/v1/`` takes any printable ``client_order_id`` up to 64 characters; v3 finds the order by it (from a
    break-it review: -1100 for anything outside Binance's pattern for new ids)."""
    user, signed = trader
    placed = place(user, side="buy", price="49000", qty="0.01", client_order_id=client_order_id)

    got = signed("GET", "order", symbol="BTCUSDT", origClientOrderId=client_order_id)
    assert (got.status_code, got.json()["orderId"], got.json()["clientOrderId"]) == (200, placed.id, client_order_id)
    cancelled = signed("DELETE", "order", symbol="BTCUSDT", origClientOrderId=client_order_id).json()
    assert (cancelled["orderId"], cancelled["status"]) == (placed.id, "CANCELED")
    too_long = signed("GET", "order", symbol="BTCUSDT", origClientOrderId="x" * 65)
    assert (too_long.status_code, too_long.json()["code"]) == (400, -1100)


def test_an_order_found_by_its_client_order_id_is_answered_without_reading_the_engines_queue(trader):
    """The queue of commands is read only when no order has the id (it may still be queued: -1007, not -2013)."""
    user, signed = trader
    placed = place(user, side="buy", price="49000", qty="0.01", client_order_id="bot-8")

    with CaptureQueriesContext(connection) as found:
        got = signed("GET", "order", symbol="BTCUSDT", origClientOrderId="bot-8")
    with CaptureQueriesContext(connection) as missed:
        absent = signed("GET", "order", symbol="BTCUSDT", origClientOrderId="bot-9")

    assert (got.status_code, got.json()["orderId"]) == (200, placed.id)
    assert (absent.status_code, absent.json()["code"]) == (400, -2013)
    assert not [q for q in found.captured_queries if "orders_command" in q["sql"]]
    assert [q for q in missed.captured_queries if "orders_command" in q["sql"]]


def test_unknown_orders(trader):
    _, signed = trader
    assert signed("GET", "order", symbol="BTCUSDT", orderId=123).json()["code"] == -2013
    assert signed("GET", "order", symbol="BTCUSDT").json()["code"] == -1102
    assert signed("DELETE", "order", symbol="BTCUSDT", origClientOrderId="nope").json()["code"] == -2011


def test_another_users_order_does_not_exist(trader, maker, client, signing_key):
    _, signed = trader
    theirs = place(maker, side="sell", price="70000", qty="0.1")
    assert signed("GET", "order", symbol="BTCUSDT", orderId=theirs.id).json()["code"] == -2013
    assert signed("DELETE", "order", symbol="BTCUSDT", orderId=theirs.id).json()["code"] == -2011


# Signing -------------------------------------------------------------------------------------------


def test_a_wrong_signature_is_refused(trader):
    _, signed = trader
    good = signed.sign({"symbol": "BTCUSDT"})
    tampered = good.replace("symbol=BTCUSDT", "symbol=ETHUSDT")
    response = signed.send("GET", "openOrders", tampered)
    assert (response.status_code, response.json()["code"]) == (400, -1022)
    response = signed.send("GET", "openOrders", good.rsplit("&signature=", 1)[0])
    assert response.json()["code"] == -1102 and "signature" in response.json()["msg"]


def test_timestamps_outside_the_window_are_refused(trader):
    _, signed = trader
    now = int(time.time() * 1000)
    stale = signed.send("GET", "account", signed.sign({}, timestamp=now - 6000))
    assert (stale.status_code, stale.json()["code"]) == (400, -1021)
    widened = signed.send("GET", "account", signed.sign({"recvWindow": 10000}, timestamp=now - 6000))
    assert widened.status_code == 200
    ahead = signed.send("GET", "account", signed.sign({}, timestamp=now + 5000))
    assert ahead.json()["code"] == -1021
    too_wide = signed.send("GET", "account", signed.sign({"recvWindow": 60001}))
    assert too_wide.json()["code"] == -1131
    too_wide_order = signed.send("POST", "order", signed.sign({**ORDER, "recvWindow": 600000}))  # break-it review
    assert (too_wide_order.status_code, too_wide_order.json()["code"]) == (400, -1131)
    assert signed.send("GET", "account", "recvWindow=5000").json()["code"] == -1102


@pytest.mark.parametrize(
    ("recv_window", "code"),
    [
        ("6000.346", None),  # 5.5 s late: inside the window
        ("5000.5", -1021),  # well formed, and the request is outside it
        ("6000.3461", -1100),
        ("-1", -1100),
        ("0", -1100),
        ("1e3", -1100),
        ("60000.001", -1131),
    ],
)
def test_a_recv_window_takes_up_to_three_decimals_as_binance_does(trader, recv_window, code):
    """Binance: "recvWindow ... supports up to three decimal places of precision (e.g., 6000.346)" (break-it review:
    5000.5 was refused); anything else is -1100 naming the one legal range."""
    _, signed = trader
    now = int(time.time() * 1000)
    response = signed.send("GET", "account", signed.sign({"recvWindow": recv_window}, timestamp=now - 5500))
    if code is None:
        assert response.status_code == 200, response.json()
    else:
        assert (response.status_code, response.json()["code"]) == (400, code)
    if code == -1100:
        assert "legal range is '0.001..60000, at most three decimals'" in response.json()["msg"]


def test_a_captured_request_replayed_after_its_window_is_refused(trader, usdt):
    user, signed = trader
    captured = signed.sign({**ORDER, "recvWindow": 1000})
    assert signed.send("POST", "order", captured).status_code == 200
    time.sleep(1.1)
    replayed = signed.send("POST", "order", captured)
    assert (replayed.status_code, replayed.json()["code"]) == (400, -1021)
    assert Order.objects.count() == 1


def test_keys_and_scopes(client, trader, signing_key):
    user, _ = trader
    read_only = Signer(client, *signing_key(user, "read"))
    assert read_only("GET", "account").status_code == 200
    response = read_only("POST", "order", **ORDER)
    assert (response.status_code, response.json()["code"]) == (401, -2015)
    nobody = Signer(client, "ex_nothing_here", "secret")
    assert nobody("GET", "account").json()["code"] == -2015
    anonymous = client.get("/api/v3/account")
    assert (anonymous.status_code, anonymous.json()["code"]) == (401, -2014)


def test_order_count_limit(trader, settings):
    _, signed = trader
    settings.BINANCE_ORDERS_PER_10_SECONDS = 0
    response = signed("POST", "order", **ORDER)
    assert (response.status_code, response.json()["code"]) == (429, -1015)
    assert response.headers["Retry-After"] and Order.objects.count() == 0


def test_listen_key_create_keep_alive_close(client, trader, signing_key):
    user, signed = trader
    headers = {"HTTP_X_MBX_APIKEY": signed.raw_key}
    form = {"content_type": "application/x-www-form-urlencoded", **headers}
    created = client.post("/api/v3/userDataStream", "", **form)
    assert created.status_code == 200, created.content
    key = created.json()["listenKey"]
    assert len(key) == 64
    assert "no-store" in created.get("Cache-Control", "")  # the key opens the user's stream: no cache keeps it
    assert client.put("/api/v3/userDataStream", f"listenKey={key}", **form).json() == {}
    assert client.delete(f"/api/v3/userDataStream?listenKey={key}", **headers).json() == {}
    gone = client.put("/api/v3/userDataStream", f"listenKey={key}", **form)
    assert (gone.status_code, gone.json()["code"]) == (400, -1125)
    assert client.put("/api/v3/userDataStream", **form).json()["code"] == -1102
    assert (
        client.post("/api/v3/userDataStream", "", content_type="application/x-www-form-urlencoded").json()["code"]
        == -2014
    )


def test_the_api_keys_live_listen_key_is_returned_and_kept_alive_until_closed(client, trader, signing_key):
    """Binance: "If the account has an active listenKey, that listenKey will be returned and its validity extended"
    (break-it review: every POST made a new key, 120 calls 120 live keys)."""
    from apps.streams.models import StreamToken
    from apps.streams.selectors import stream_token_user_id

    user, signed = trader
    form = {"content_type": "application/x-www-form-urlencoded", "HTTP_X_MBX_APIKEY": signed.raw_key}
    first = client.post("/api/v3/userDataStream", "", **form).json()["listenKey"]
    StreamToken.objects.update(expires_at=timezone.now() + timedelta(minutes=5))

    again = client.post("/api/v3/userDataStream", "", **form).json()["listenKey"]

    assert again == first and stream_token_user_id(key=again) == user.id
    (token,) = StreamToken.objects.all()
    assert token.expires_at > timezone.now() + timedelta(minutes=59)  # extended, as a keep-alive would
    assert first not in token.nonce and first != token.key_hash  # the table alone does not give the key
    other_key = signing_key(user, "read")[0]
    other = client.post(
        "/api/v3/userDataStream", "", content_type="application/x-www-form-urlencoded", HTTP_X_MBX_APIKEY=other_key
    ).json()["listenKey"]
    assert other != first  # a listenKey lives with the API key that made it
    client.delete(f"/api/v3/userDataStream?listenKey={first}", HTTP_X_MBX_APIKEY=signed.raw_key)
    assert client.post("/api/v3/userDataStream", "", **form).json()["listenKey"] not in (first, other)


def test_a_listen_key_made_under_another_secret_key_is_replaced_not_refused(client, trader, settings):
    user, signed = trader
    form = {"content_type": "application/x-www-form-urlencoded", "HTTP_X_MBX_APIKEY": signed.raw_key}
    first = client.post("/api/v3/userDataStream", "", **form).json()["listenKey"]
    settings.SECRET_KEY = "rotated-" + settings.SECRET_KEY

    again = client.post("/api/v3/userDataStream", "", **form)

    assert again.status_code == 200 and again.json()["listenKey"] != first


def test_a_key_from_the_token_endpoint_signs_requests(client, btc, usdt, btc_usdt):
    user = UserFactory()
    fund(user, usdt, "1000")
    issued = client.post(
        "/api/v1/auth/token/",
        {"username": user.username, "password": "correct horse battery staple", "scopes": ["read", "trade"]},
        content_type="application/json",
    ).json()
    signed = Signer(client, issued["token"], issued["secret"])
    body = signed("GET", "account").json()
    assert {"asset": "USDT", "free": "1000.000000", "locked": "0.000000"} in body["balances"]
    assert Signer(client, issued["token"], "0" * 64)("GET", "account").json()["code"] == -1022


def test_a_key_used_outside_its_ip_allow_list_is_refused(client, btc_usdt):
    from apps.accounts.services import api_key_create

    user = UserFactory()
    created = api_key_create(user_id=user.id, name="bot", scopes=["read"], allowed_ips=["203.0.113.7"])
    response = Signer(client, created.raw_key, created.secret)("GET", "account")
    assert (response.status_code, response.json()["code"]) == (401, -2015)
    allowed = api_key_create(user_id=user.id, name="bot", scopes=["read"], allowed_ips=["127.0.0.1"])
    assert Signer(client, allowed.raw_key, allowed.secret)("GET", "account").status_code == 200


def test_a_revoked_key_is_refused(client, trader):
    from apps.accounts.models import ApiKey
    from apps.accounts.services import api_key_revoke

    user, signed = trader
    api_key_revoke(user_id=user.id, key_id=ApiKey.objects.get(user=user).id)
    assert signed("GET", "account").json()["code"] == -2015


def test_a_halted_market_refuses_orders_as_market_closed(trader, btc_usdt):
    from apps.orders.services import market_halt

    _, signed = trader
    market_halt(market_id=btc_usdt.id, operator_id=UserFactory().id, reason="test")
    assert signed("POST", "order", **ORDER).json() == {"code": -2010, "msg": "Market is closed."}


def test_fill_or_kill_that_cannot_fill_is_rejected(trader, maker):
    _, signed = trader
    place(maker, side="sell", price="59900", qty="0.1")
    response = signed("POST", "order", **{**ORDER, "timeInForce": "FOK", "quantity": "0.2", "price": "60000"})
    assert response.json()["code"] == -2010 and "FOK" in response.json()["msg"]
    assert Order.objects.filter(user=trader[0]).count() == 0


def test_a_client_order_id_reused_for_another_order_is_a_duplicate(trader):
    _, signed = trader
    first = signed("POST", "order", **ORDER, newClientOrderId="same")
    again = signed("POST", "order", **ORDER, newClientOrderId="same")
    assert again.json()["orderId"] == first.json()["orderId"]  # the same order sent twice: the original
    other = signed("POST", "order", **{**ORDER, "price": "50001"}, newClientOrderId="same")
    assert other.json() == {"code": -2010, "msg": "Duplicate order sent."}


def test_a_replay_answers_the_placements_transact_time_not_its_last_change(trader, maker):
    """Break-it review: a replay under the same newClientOrderId answered the order's last change as transactTime."""
    _, signed = trader
    first = signed("POST", "order", **ORDER, newClientOrderId="again").json()
    place(maker, side="sell", price="50000", qty="0.04")  # fills part of it, later
    again = signed("POST", "order", **ORDER, newClientOrderId="again").json()

    assert (again["orderId"], again["status"]) == (first["orderId"], "PARTIALLY_FILLED")
    assert again["transactTime"] == first["transactTime"] == again["workingTime"]


@pytest.mark.parametrize(("seconds_ago", "replayed"), [(59, True), (61, False)])
def test_a_client_order_id_of_a_filled_order_returns_it_only_within_a_retrys_time(
    trader, maker, usdt, seconds_ago, replayed
):
    """Break-it review: a grid bot reusing a level's newClientOrderId minutes after its order filled got that old
    order back (200, FILLED) and counted a fill that never happened. Within 60 s (the longest a signed request lives:
    a retry) it is the order as placed; later, -2010 and nothing placed (Binance would place a new order)."""
    user, signed = trader
    place(maker, side="sell", price="50000", qty="0.1")
    first = signed("POST", "order", **ORDER, newClientOrderId="grid-1").json()
    assert first["status"] == "FILLED"
    Order.objects.filter(id=first["orderId"]).update(
        created_at=Order.objects.get(id=first["orderId"]).created_at - timedelta(seconds=seconds_ago)
    )
    before = balance(user, usdt)

    again = signed("POST", "order", **ORDER, newClientOrderId="grid-1")

    if replayed:
        assert (again.status_code, again.json()["orderId"], again.json()["status"]) == (200, first["orderId"], "FILLED")
    else:
        assert (again.status_code, again.json()) == (400, {"code": -2010, "msg": "Duplicate order sent."})
    assert Order.objects.filter(user=user).count() == 1 and balance(user, usdt) == before


def test_a_client_order_id_of_an_open_order_returns_it_however_late(trader):
    user, signed = trader
    first = signed("POST", "order", **ORDER, newClientOrderId="resting").json()
    Order.objects.filter(id=first["orderId"]).update(
        created_at=Order.objects.get(id=first["orderId"]).created_at - timedelta(minutes=10)
    )

    again = signed("POST", "order", **ORDER, newClientOrderId="resting")

    assert (again.status_code, again.json()["orderId"], again.json()["status"]) == (200, first["orderId"], "NEW")
    assert Order.objects.filter(user=user).count() == 1


def test_a_body_that_is_not_a_form_is_refused(trader):
    _, signed = trader
    response = signed.client.post(
        "/api/v3/order", '{"symbol": "BTCUSDT"}', content_type="application/json", HTTP_X_MBX_APIKEY=signed.raw_key
    )
    assert (response.status_code, response.json()["code"]) == (400, -1100)


def test_a_logged_in_session_authenticates_nothing_here(client, trader):
    user, _ = trader
    client.force_login(user)
    response = client.get("/api/v3/account")
    assert (response.status_code, response.json()["code"]) == (401, -2014)
    response = client.post("/api/v3/order", "symbol=BTCUSDT", content_type="application/x-www-form-urlencoded")
    assert (response.status_code, response.json()["code"]) == (401, -2014)


def test_account_reports_an_operators_trading_freeze_and_withdrawal_block(client, btc_usdt, funded_user):
    """Regression: ``canTrade`` and ``canWithdraw`` were the key's scopes alone, true on a frozen account."""
    user = funded_user(usdt="1000")
    created = api_key_create(user_id=user.id, name="all", scopes=["read", "trade", "withdraw"], otp=fresh_code(user))
    signed = Signer(client, created.raw_key, created.secret)
    operator = UserFactory(is_staff=True)
    operator.groups.add(Group.objects.get(name="operators"))
    assert (signed("GET", "account").json()["canTrade"], signed("GET", "account").json()["canWithdraw"]) == (True, True)

    account_trading_freeze(user_id=user.id, operator_id=operator.id, frozen=True, reason="chargeback")
    frozen = signed("GET", "account").json()
    account_withdrawals_block(user_id=user.id, operator_id=operator.id, blocked=True, reason="chargeback")
    blocked = signed("GET", "account").json()
    account_trading_freeze(user_id=user.id, operator_id=operator.id, frozen=False, reason="settled")
    unfrozen = signed("GET", "account").json()

    assert (frozen["canTrade"], frozen["canWithdraw"]) == (False, True)
    assert (blocked["canTrade"], blocked["canWithdraw"]) == (False, False)
    assert (unfrozen["canTrade"], unfrozen["canWithdraw"]) == (True, False)


def test_account_cannot_withdraw_once_the_second_factor_is_off(client, funded_user):
    """A withdraw key was granted with a code; turning the second factor off takes its withdrawals away."""
    from apps.accounts.enrolment import second_factor_remove

    user = funded_user(usdt="1000")
    created = api_key_create(user_id=user.id, name="all", scopes=["read", "withdraw"], otp=fresh_code(user))
    signed = Signer(client, created.raw_key, created.secret)
    assert signed("GET", "account").json()["canWithdraw"] is True

    second_factor_remove(user_id=user.id, otp=fresh_code(user))

    assert signed("GET", "account").json()["canWithdraw"] is False


def test_cancel_restrictions_cancel_only_an_order_in_the_status_named(trader, maker):
    """``cancelRestrictions``: ``ONLY_NEW`` cancels an order nothing has filled, ``ONLY_PARTIALLY_FILLED`` one partly
    filled; otherwise -2011 and the order stays open (judged when the cancel is applied: the engine's test,
    ``test_a_cancel_restricted_to_a_status_is_judged_when_applied_after_the_fills_queued_before_it``)."""
    _, signed = trader
    new = signed("POST", "order", **ORDER).json()["orderId"]
    partly = signed("POST", "order", **{**ORDER, "price": "50001"}).json()["orderId"]
    place(maker, side="sell", price="50001", qty="0.01")
    restricted = {"code": -2011, "msg": "Order was not canceled due to cancel restrictions."}

    refused = [
        signed("DELETE", "order", symbol="BTCUSDT", orderId=partly, cancelRestrictions="ONLY_NEW"),
        signed("DELETE", "order", symbol="BTCUSDT", orderId=new, cancelRestrictions="ONLY_PARTIALLY_FILLED"),
    ]

    assert [(r.status_code, r.json()) for r in refused] == [(400, restricted)] * 2
    assert Order.objects.get(id=partly).status == "partially_filled" and Order.objects.get(id=new).status == "open"
    cancelled = [
        signed("DELETE", "order", symbol="BTCUSDT", orderId=partly, cancelRestrictions="ONLY_PARTIALLY_FILLED"),
        signed("DELETE", "order", symbol="BTCUSDT", orderId=new, cancelRestrictions="ONLY_NEW"),
    ]
    assert [(r.status_code, r.json()["status"], r.json()["executedQty"]) for r in cancelled] == [
        (200, "CANCELED", "0.01000000"),
        (200, "CANCELED", "0.00000000"),
    ]


def test_cancel_restrictions_by_orig_client_order_id(trader, maker):
    """By ``origClientOrderId`` the restriction is judged where the cancel is applied too (break-it review: with a
    restriction, a cancel of a placement still queued was answered -1007 and never queued)."""
    _, signed = trader
    signed("POST", "order", **{**ORDER, "price": "50001"}, newClientOrderId="grid-1")
    place(maker, side="sell", price="50001", qty="0.01")

    refused = signed("DELETE", "order", symbol="BTCUSDT", origClientOrderId="grid-1", cancelRestrictions="ONLY_NEW")
    cancelled = signed(
        "DELETE", "order", symbol="BTCUSDT", origClientOrderId="grid-1", cancelRestrictions="ONLY_PARTIALLY_FILLED"
    )

    assert refused.json() == {"code": -2011, "msg": "Order was not canceled due to cancel restrictions."}
    assert (cancelled.status_code, cancelled.json()["status"], cancelled.json()["origClientOrderId"]) == (
        200,
        "CANCELED",
        "grid-1",
    )
