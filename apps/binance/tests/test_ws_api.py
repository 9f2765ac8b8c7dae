"""``/ws-api/v3`` against a live uvicorn process: signed user-data subscriptions, their refusals, the events.

The server is ``live_asgi`` (uvicorn serving ``exchange.asgi``, and the streams' relay).
"""

import hashlib
import hmac
import json
import time

import pytest
import requests
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from apps.ledger.tests.factories import UserFactory, fund
from apps.streams.consumers import REQUEST_ID_RULE

pytestmark = pytest.mark.django_db(transaction=True)


def subscribe_params(raw_key: str, secret: str, *, timestamp: int | None = None) -> dict:
    """Binance's WebSocket API signing: ``name=value`` sorted by name, joined with ``&``, HMAC-SHA256 hex."""
    params = {"apiKey": raw_key, "timestamp": timestamp if timestamp is not None else int(time.time() * 1000)}
    payload = "&".join(f"{name}={value}" for name, value in sorted(params.items()))
    return {**params, "signature": hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()}


def ask(socket, method: str, params: dict | None = None, request_id: str = "1") -> dict:
    socket.send(json.dumps({"id": request_id, "method": method, "params": params or {}}))
    return json.loads(socket.recv(timeout=10))


def place_buy(web: str, raw_key: str, secret: str) -> dict:
    """A signed ``POST /api/v3/order``: a resting limit buy of 0.1 BTC at 50,000 USDT; Binance's answer."""
    query = f"symbol=BTCUSDT&side=BUY&type=LIMIT&timeInForce=GTC&quantity=0.1&price=50000&timestamp={int(time.time() * 1000)}"
    signature = hmac.new(secret.encode(), query.encode(), hashlib.sha256).hexdigest()
    return requests.post(
        f"http://{web}/api/v3/order",
        data=f"{query}&signature={signature}",
        headers={"X-MBX-APIKEY": raw_key, "Content-Type": "application/x-www-form-urlencoded"},
        timeout=30,
    ).json()


def test_signed_subscription_and_refusals(live_asgi, btc, usdt, btc_usdt, signing_key):
    user = UserFactory()
    fund(user, usdt, "100000")
    raw_key, secret = signing_key(user, "read", "trade")
    web = live_asgi
    with connect(f"ws://{web}/ws-api/v3", open_timeout=10) as socket:
        assert ask(socket, "ping") == {"id": "1", "status": 200, "result": {}}
        unknown = ask(socket, "order.place")
        assert (unknown["status"], unknown["error"]["code"]) == (400, -1020)
        forged = ask(socket, "userDataStream.subscribe.signature", subscribe_params(raw_key, "0" * 64))
        assert forged["error"]["code"] == -1022
        stale = subscribe_params(raw_key, secret, timestamp=int(time.time() * 1000) - 60_000)
        assert ask(socket, "userDataStream.subscribe.signature", stale)["error"]["code"] == -1021
        nobody = ask(socket, "userDataStream.subscribe.signature", subscribe_params("ex_none_x", secret))
        assert (nobody["status"], nobody["error"]["code"]) == (401, -2015)
        ok = ask(socket, "userDataStream.subscribe.signature", subscribe_params(raw_key, secret), "2")
        assert ok == {"id": "2", "status": 200, "result": {"subscriptionId": 0}}

        placed = place_buy(web, raw_key, secret)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = json.loads(socket.recv(timeout=30))
            if message.get("event", {}).get("e") == "executionReport":
                break
        assert message["subscriptionId"] == 0
        assert (message["event"]["i"], message["event"]["X"], message["event"]["c"]) == (
            placed["orderId"],
            "NEW",
            placed["clientOrderId"],
        )


def test_unsubscribing_one_subscription_id_keeps_the_others_and_ids_are_not_reused(
    live_asgi, btc, usdt, btc_usdt, signing_key
):
    """Break-it review: ``userDataStream.unsubscribe`` ignored ``subscriptionId`` and ended every subscription
    of the connection. Binance ends only the one named (none when it is not active) and all without it."""
    alice, bob = UserFactory(), UserFactory()
    keys = {}
    for user in (alice, bob):
        fund(user, usdt, "100000")
        keys[user] = signing_key(user, "read", "trade")
    with connect(f"ws://{live_asgi}/ws-api/v3", open_timeout=10) as socket:
        for expected_id, user in enumerate((alice, bob)):
            subscribed = ask(socket, "userDataStream.subscribe.signature", subscribe_params(*keys[user]))
            assert subscribed["result"] == {"subscriptionId": expected_id}
        for malformed in (True, "one", -1, 1.5, None):
            refused = ask(socket, "userDataStream.unsubscribe", {"subscriptionId": malformed})
            assert (refused["status"], refused["error"]["code"]) == (400, -1100), malformed
        assert ask(socket, "userDataStream.unsubscribe", {"subscriptionId": 99}) == {
            "id": "1",
            "status": 200,
            "result": {},
        }
        assert ask(socket, "userDataStream.unsubscribe", {"subscriptionId": 0})["status"] == 200

        alices = place_buy(live_asgi, *keys[alice])
        bobs = place_buy(live_asgi, *keys[bob])
        events = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and bobs["orderId"] not in {event["event"].get("i") for event in events}:
            events.append(json.loads(socket.recv(timeout=30)))
        socket.send(
            json.dumps(
                {"id": "2", "method": "userDataStream.subscribe.signature", "params": subscribe_params(*keys[alice])}
            )
        )
        while "id" not in (answer := json.loads(socket.recv(timeout=10))):
            events.append(answer)  # bob's account update may follow his order's
        assert answer["result"] == {"subscriptionId": 2}
        assert {event["subscriptionId"] for event in events} == {1}
        assert alices["orderId"] not in {event["event"].get("i") for event in events}


def test_json_nested_too_deeply_is_refused_and_the_connection_stays_usable(live_asgi, btc_usdt):
    """A 50,000-deep array made the JSON decoder raise RecursionError, which dropped the connection."""
    deep = '{"id": 1, "method": "SUBSCRIBE", "params": ' + "[" * 50_000 + "]" * 50_000 + "}"
    with connect(f"ws://{live_asgi}/ws-api/v3", open_timeout=10) as socket:
        socket.send(deep)
        refused = json.loads(socket.recv(timeout=10))
        assert (refused["status"], refused["error"]["code"]) == (400, -1102)
        assert ask(socket, "ping") == {"id": "1", "status": 200, "result": {}}
    with connect(f"ws://{live_asgi}/stream?streams=btcusdt@trade", open_timeout=10) as socket:
        socket.send(deep)
        refused = json.loads(socket.recv(timeout=10))
        assert (refused["id"], refused["error"]["code"]) == (None, 3)  # Binance's "Invalid JSON"
        socket.send(json.dumps({"method": "LIST_SUBSCRIPTIONS", "id": 2}))
        assert json.loads(socket.recv(timeout=10)) == {"result": ["btcusdt@trade"], "id": 2}
        for params in ("btcusdt@depth", [1], {"a": 1}):  # a break-it review: answered with "id": null
            socket.send(json.dumps({"method": "SUBSCRIBE", "params": params, "id": 3}))
            refused = json.loads(socket.recv(timeout=10))
            assert (refused["id"], refused["error"]["fields"]) == (3, {"params": "params is a list of stream names."})


def test_a_request_id_that_is_not_an_integer_a_string_or_null_is_refused_and_never_echoed(live_asgi, btc_usdt):
    """``{"id": 1e400}`` was echoed as ``Infinity``, which is not JSON; objects, lists and 1.5 were echoed too."""
    bad = ["1e400", "-1e400", "NaN", "1.5", '{"a": 1}', "[1]", "true", "-1", '""']
    with connect(f"ws://{live_asgi}/ws-api/v3", open_timeout=10) as socket:
        for request_id in bad:
            socket.send(f'{{"id": {request_id}, "method": "ping", "params": {{}}}}')
            refused = json.loads(socket.recv(timeout=10))  # valid JSON, never a bare Infinity or NaN
            assert (refused["id"], refused["status"], refused["error"]["code"]) == (None, 400, -1102), request_id
        assert ask(socket, "ping", request_id="x" * 64) == {"id": "x" * 64, "status": 200, "result": {}}
    with connect(f"ws://{live_asgi}/stream?streams=btcusdt@trade", open_timeout=10) as socket:
        for request_id in bad:
            socket.send(f'{{"method": "LIST_SUBSCRIPTIONS", "id": {request_id}}}')
            refused = json.loads(socket.recv(timeout=10))
            assert (refused["id"], refused["error"]["fields"]) == (None, {"id": REQUEST_ID_RULE}), request_id
        socket.send(json.dumps({"method": "LIST_SUBSCRIPTIONS", "id": 2**63 - 1}))
        assert json.loads(socket.recv(timeout=10)) == {"result": ["btcusdt@trade"], "id": 2**63 - 1}


def test_a_subscription_ends_when_the_api_key_that_signed_it_is_revoked(tmp_path, signing_key):
    """Regression: a ``/ws-api/v3`` subscription kept streaming after its API key was revoked. Now it gets
    ``eventStreamTerminated`` and the connection is closed 4401 within the check interval (0.5 s here)."""
    from apps.accounts.models import ApiKey
    from apps.accounts.services import api_key_revoke
    from apps.streams.tests.processes import start_web

    web_process, web = start_web(tmp_path, "ws-api-keys", env={"STREAMS_TOKEN_CHECK_SECONDS": "0.5"})
    user = UserFactory()
    raw_key, secret = signing_key(user, "read")
    try:
        with connect(f"ws://{web}/ws-api/v3", open_timeout=10) as socket:
            subscribed = ask(socket, "userDataStream.subscribe.signature", subscribe_params(raw_key, secret))
            assert subscribed["result"] == {"subscriptionId": 0}

            api_key_revoke(user_id=user.id, key_id=ApiKey.objects.get(user=user).pk)

            ended = json.loads(socket.recv(timeout=10))
            with pytest.raises(ConnectionClosed) as closed:
                socket.recv(timeout=10)
    finally:
        web_process.stop()
    assert ended["subscriptionId"] == 0 and ended["event"]["e"] == "eventStreamTerminated"
    assert closed.value.rcvd.code == 4401


def test_an_ip_allow_list_is_not_passed_by_a_forwarded_header_without_a_trusted_proxy(live_asgi, signing_key):
    """Break-it review: uvicorn as the Procfile ran it read ``X-Forwarded-For`` itself for a peer on 127.0.0.1, so a
    client naming an allowed address in it passed the key's allow-list (``TRUSTED_PROXY_COUNT`` 0: no proxy)."""
    from apps.accounts.models import ApiKey

    user = UserFactory()
    raw_key, secret = signing_key(user, "read")
    ApiKey.objects.filter(user=user).update(allowed_ips=["10.9.9.9/32"])
    answers = []
    for headers in ({}, {"X-Forwarded-For": "10.9.9.9"}, {"X-Real-IP": "10.9.9.9", "Forwarded": "for=10.9.9.9"}):
        with connect(f"ws://{live_asgi}/ws-api/v3", open_timeout=10, additional_headers=headers) as socket:
            answers.append(ask(socket, "userDataStream.subscribe.signature", subscribe_params(raw_key, secret)))
    assert [(answer["status"], answer["error"]["code"]) for answer in answers] == [(401, -2015)] * 3


def test_an_ip_allow_list_sees_the_client_behind_the_proxies_as_rest_does(tmp_path, signing_key):
    """Review: a signed subscription checked the key's allow-list against the socket's peer, the proxy's address
    behind one on another host, not the client ``TRUSTED_PROXY_COUNT`` names, as REST does."""
    from apps.accounts.models import ApiKey
    from apps.streams.tests.processes import start_web

    env = {"TRUSTED_PROXY_COUNT": "1"}
    web_process, web = start_web(tmp_path, "ws-api-proxy", env=env)
    user = UserFactory()
    raw_key, secret = signing_key(user, "read")
    ApiKey.objects.filter(user=user).update(allowed_ips=["203.0.113.9/32"])
    try:
        answers = []
        for forwarded in ("198.51.100.7, 203.0.113.9", "203.0.113.9, 198.51.100.7"):  # the proxy appends the client
            headers = {"X-Forwarded-For": forwarded}
            with connect(f"ws://{web}/ws-api/v3", open_timeout=10, additional_headers=headers) as socket:
                answers.append(ask(socket, "userDataStream.subscribe.signature", subscribe_params(raw_key, secret)))
    finally:
        web_process.stop()
    assert answers[0]["result"] == {"subscriptionId": 0}
    assert answers[1]["status"] == 401 and answers[1]["error"]["code"] == -2015  # the client is 198.51.100.7


def test_requests_past_the_connections_budget_get_1003_and_the_close(live_asgi, btc_usdt):
    """Break-it review: a client may flood a connection with requests (each signed subscription reads the database);
    Binance allows 5 messages a second. Here bursts of 10 pass, at 5 a second."""
    with connect(f"ws://{live_asgi}/ws-api/v3", open_timeout=10) as socket:
        for request_id in range(30):
            socket.send(json.dumps({"id": request_id, "method": "ping", "params": {}}))
        answers = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                answers.append(json.loads(socket.recv(timeout=10)))

    assert [answer["id"] for answer in answers[:-1]] == list(range(10))
    assert (answers[-1]["status"], answers[-1]["error"]["code"]) == (429, -1003)
    assert closed.value.rcvd.code == 1008
