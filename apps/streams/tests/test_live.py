"""The streams end to end: a real WebSocket client against two live uvicorn processes and the relay.

Orders arrive over HTTP at both web processes at once (real threads), so placements and
cancels of one market commit from two processes; the depth stream is read from one of them.
"""

import json
import random
import threading
import time
from decimal import Decimal

import pytest
import requests

from apps.accounts.services import api_key_create
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.models import Market
from apps.streams.book import LocalBook

from .clients import StreamReader, rest_depth, rest_levels

pytestmark = pytest.mark.django_db(transaction=True)

D = Decimal


def trader(btc, usdt, scopes=("read", "trade")):
    user = UserFactory()
    fund(user, btc, "100")
    fund(user, usdt, "1000000")
    return user, api_key_create(user_id=user.id, name="test", scopes=scopes)[1]


def trade_at_100(web: str, btc, usdt) -> None:
    """A sell of 0.03 BTC at 100.00 and a buy of 0.02 that trades with it, each by a new trader, over HTTP."""
    for side, qty in (("sell", "0.03"), ("buy", "0.02")):
        body = {"market": "BTC-USDT", "side": side, "type": "limit", "price": "100.00", "qty": qty}
        headers = {"Authorization": f"Token {trader(btc, usdt)[1]}"}
        response = requests.post(f"http://{web}/api/v1/orders/", json=body, headers=headers, timeout=30)
        assert response.status_code == 201, response.text


def storm(webs: list[str], keys: list[str], *, operations: int, seed: int, changes: list | None = None) -> None:
    """``operations`` random limit orders and cancels per key, each key on its own thread and web process.

    Appends to ``changes`` one item per book change committed (a placement, a cancel that was not a 409).
    """
    errors: list[BaseException] = []
    changes = [] if changes is None else changes

    def run(index: int, key: str) -> None:
        rng = random.Random(seed + index)
        session = requests.Session()
        session.headers["Authorization"] = f"Token {key}"
        base = f"http://{webs[index % len(webs)]}/api/v1"
        open_orders: list[int] = []
        try:
            for _ in range(operations):
                if open_orders and rng.random() < 0.35:
                    order_id = open_orders.pop(rng.randrange(len(open_orders)))
                    response = session.delete(f"{base}/orders/{order_id}/", timeout=30)
                    assert response.status_code in (200, 409), response.text
                    if response.status_code == 200:
                        changes.append(order_id)
                    continue
                body = {
                    "market": "BTC-USDT",
                    "side": rng.choice(["buy", "sell"]),
                    "type": "limit",
                    "price": str(D(rng.randrange(9900, 10100, 25)) / 100),
                    "qty": str(D(rng.randrange(2, 9)) / 100),
                }
                response = session.post(f"{base}/orders/", json=body, timeout=30)
                assert response.status_code == 201, response.text
                changes.append(response.json()["id"])
                if response.json()["status"] in ("open", "partially_filled"):
                    open_orders.append(response.json()["id"])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, key)) for i, key in enumerate(keys)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def synced_book(reader: StreamReader, web: str, unwrap=lambda message: message) -> LocalBook:
    """Binance's procedure: buffer the stream, take a snapshot once an event is buffered (again while the
    buffer starts after it), apply the buffer."""
    book = LocalBook()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for message in reader.take():
            book.on_event(unwrap(message))
        if book.buffer and book.snapshot(rest_depth(web)):
            return book
        time.sleep(0.02)
    raise AssertionError("no snapshot met the buffered events")


def catch_up(book: LocalBook, reader: StreamReader, target: int, unwrap=lambda message: message) -> None:
    """Apply the stream until the book is at update ``target``."""
    while book.last_update_id is None or book.last_update_id < target:
        for message in reader.wait_for(lambda _: True):
            book.on_event(unwrap(message))


def in_background(**kwargs) -> threading.Thread:
    thread = threading.Thread(target=storm, kwargs=kwargs)
    thread.start()
    return thread


def test_the_book_rebuilt_from_the_depth_stream_equals_the_rest_depth_after_a_storm(
    stream_servers, btc_usdt, btc, usdt
):
    webs = stream_servers.webs
    keys = [trader(btc, usdt)[1] for _ in range(4)]
    changes = []
    storm(webs, keys[:2], operations=15, seed=1, changes=changes)  # a book to start from
    reader = StreamReader(f"ws://{webs[0]}/ws/btcusdt@depth")
    try:
        running = in_background(webs=webs, keys=keys, operations=60, seed=2, changes=changes)
        book = synced_book(reader, webs[1])  # the snapshot is taken in the middle of the storm
        running.join()
        final = rest_depth(webs[1])
        catch_up(book, reader, final["last_update_id"])
    finally:
        reader.close()

    assert final["last_update_id"] == Market.objects.get().sequence == len(changes)  # one update per change
    assert book.last_update_id == final["last_update_id"]
    assert book.levels() == rest_levels(final)
    assert book.bids or book.asks  # a book was compared (the storm's interleaving may empty one side)


def test_a_dropped_connection_resumes_from_a_fresh_snapshot(stream_servers, btc_usdt, btc, usdt):
    webs = stream_servers.webs
    keys = [trader(btc, usdt)[1] for _ in range(2)]
    storm(webs, keys, operations=10, seed=3)
    dropped = StreamReader(f"ws://{webs[0]}/stream?streams=btcusdt@depth")
    dropped.close()
    storm(webs, keys, operations=20, seed=4)  # missed by the dropped connection
    again = StreamReader(f"ws://{webs[1]}/stream?streams=btcusdt@depth")
    try:
        running = in_background(webs=webs, keys=keys, operations=20, seed=5)
        book = synced_book(again, webs[0], unwrap=lambda message: message["data"])
        running.join()
        final = rest_depth(webs[0])
        catch_up(book, again, final["last_update_id"], unwrap=lambda message: message["data"])
    finally:
        again.close()

    assert book.levels() == rest_levels(final)


def test_a_depth_event_that_skips_updates_closes_the_connection_so_the_client_resyncs(stream_servers, btc_usdt):
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from apps.streams.relay import _message

    reader = StreamReader(f"ws://{stream_servers.webs[0]}/ws/btcusdt@depth")
    group = "market.btcusdt.depth"
    event = {"e": "depthUpdate", "E": 0, "s": "BTCUSDT", "U": 0, "u": 0, "b": [], "a": []}

    async def send(first: int, last: int) -> None:  # as the relay would, on the same Redis channels
        await get_channel_layer().group_send(
            group, {**_message({**event, "U": first, "u": last}, first, last), "group": group}
        )

    try:
        for first, last in ((7, 7), (7, 7), (8, 9), (12, 12)):  # a duplicate, a continuation, then a gap
            async_to_sync(send)(first, last)
        reader.thread.join(timeout=20)
        received = reader.take()
    finally:
        reader.close()
    assert [(e["U"], e["u"]) for e in received] == [(7, 7), (8, 9)]
    assert reader.closed_code == 4409


def test_the_relay_takes_its_lock_again_and_goes_on_after_its_database_connection_is_terminated(
    stream_servers, btc_usdt, btc, usdt
):
    from django.db import connection

    from apps.streams.relay import RELAY_LOCK_KEY

    def relay_backends() -> list[int]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid = %s"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                [RELAY_LOCK_KEY],
            )
            return [row[0] for row in cursor.fetchall()]

    deadline = time.monotonic() + 30
    while not relay_backends() and time.monotonic() < deadline:  # the relay takes its lock at start
        time.sleep(0.1)
    (backend,) = relay_backends()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [backend])
    _, key = trader(btc, usdt)
    reader = StreamReader(f"ws://{stream_servers.webs[0]}/ws/btcusdt@depth")
    try:
        storm(stream_servers.webs, [key], operations=1, seed=6)
        (event,) = reader.wait_for(lambda message: message["u"] == Market.objects.get().sequence)
    finally:
        reader.close()
    assert event["U"] == event["u"] == 1
    assert len(relay_backends()) == 1 and relay_backends() != [backend]
    assert "stream relay failed; starting again" in stream_servers.relay.log()


def test_the_relay_pushes_the_current_candle_every_two_seconds_without_trades(stream_servers, btc_usdt, btc, usdt):
    from apps.orders.models import Trade

    base = f"http://{stream_servers.webs[0]}/api/v1/orders/"
    for side, (_, key) in (("sell", trader(btc, usdt)), ("buy", trader(btc, usdt))):
        body = {"market": "BTC-USDT", "side": side, "type": "limit", "price": "100.00", "qty": "0.01"}
        response = requests.post(base, json=body, headers={"Authorization": f"Token {key}"}, timeout=30)
        assert response.status_code == 201, response.text
    traded_at = int(Trade.objects.get().created_at.timestamp() * 1000)
    reader = StreamReader(f"ws://{stream_servers.webs[0]}/ws/btcusdt@kline_1m")  # after the trade's own push
    try:
        pushes = reader.wait_for(lambda _: True, timeout=15)
        # Two periodic pushes of one open candle: when its minute ends, the closed candle and the next minute's open
        # one are pushed at once, sooner than the pace after the previous push.
        while len(open_pushes := [k for k in pushes if not k["k"]["x"]]) < 2 or (
            open_pushes[-1]["k"]["t"] != open_pushes[-2]["k"]["t"]
        ):
            pushes += reader.wait_for(lambda _: True, timeout=15)
    finally:
        reader.close()

    assert {(k["e"], k["s"], k["k"]["i"]) for k in pushes} == {("kline", "BTCUSDT", "1m")}
    assert all(k["k"]["t"] >= traded_at // 60_000 * 60_000 for k in pushes)  # the trade's minute, or one after it
    first, second = open_pushes[-2:]
    assert second["E"] > first["E"]  # pushed again with no trade in between (its pace is not timed here: rule 8)


def test_a_subscription_to_kline_30m_is_accepted_and_pushed_its_candle_and_kline_1s_refused(
    stream_servers, btc_usdt, btc, usdt
):
    """A 30m candle is summed from the 15m ones when the relay reads it: a ``SUBSCRIBE`` gets Binance's answer and
    then the relay's pushes; ``kline_1s`` (Binance's, not served here) is refused with code 2."""
    from apps.orders.models import Trade

    trade_at_100(stream_servers.webs[0], btc, usdt)
    traded_at = int(Trade.objects.get().created_at.timestamp() * 1000)
    half_hour = traded_at // 1_800_000 * 1_800_000
    reader = StreamReader(f"ws://{stream_servers.webs[0]}/ws/btcusdt@depth")  # quiet once the trade is published
    try:
        reader.connection.send(json.dumps({"method": "SUBSCRIBE", "params": ["btcusdt@kline_30m"], "id": 1}))
        reader.connection.send(json.dumps({"method": "SUBSCRIBE", "params": ["btcusdt@kline_1s"], "id": 2}))
        answers = reader.wait_for(lambda message: message.get("id") == 2)
        pushes = reader.wait_for(lambda message: message.get("e") == "kline", timeout=15)
    finally:
        reader.close()

    assert {"result": None, "id": 1} in answers
    assert answers[-1]["error"]["code"] == 2 and "kline_1s" in answers[-1]["error"]["msg"]
    kline = pushes[-1]["k"]
    assert (kline["i"], kline["s"], kline["T"] - kline["t"]) == ("30m", "BTCUSDT", 1_799_999)
    price = {k: kline[k] for k in ("o", "h", "l", "c")}
    assert price == {"o": "100.000000", "h": "100.000000", "l": "100.000000", "c": "100.000000"}
    if kline["t"] == half_hour:  # the trade's half hour (else its half hour had ended: the next one, flat)
        assert (kline["v"], kline["n"], kline["x"]) == ("0.02000000", 1, False)
    else:
        assert (kline["t"], kline["v"], kline["n"]) == (half_hour + 1_800_000, "0.00000000", 0)


@pytest.mark.parametrize(
    ("path", "combined"),
    [("/ws", False), ("/ws/", False), ("/stream", True), ("/stream?streams=", True)],
)
def test_a_connection_opened_with_no_stream_subscribes_to_binance_names_with_update_speeds(
    stream_servers, btc_usdt, btc, usdt, path, combined
):
    """Break-it review: ``/ws`` and ``/stream`` with no stream, ``btcusdt@depth@100ms`` and ``btcusdt@aggTrade`` were
    refused (Hummingbot opens ``/ws`` and subscribes to ``@depth@100ms``; Binance's streams documentation)."""
    names = ["btcusdt@depth@100ms", "btcusdt@aggTrade"]
    reader = StreamReader(f"ws://{stream_servers.webs[0]}{path}")
    try:
        reader.connection.send(json.dumps({"method": "SUBSCRIBE", "params": names, "id": 1}))
        answers = reader.wait_for(lambda message: message.get("id") == 1)
        reader.connection.send(json.dumps({"method": "LIST_SUBSCRIPTIONS", "id": 2}))
        listed = reader.wait_for(lambda message: message.get("id") == 2)[-1]
        trade_at_100(stream_servers.webs[0], btc, usdt)

        def event(message: dict) -> dict:
            return message["data"] if combined else message

        seen = reader.wait_for(lambda message: event(message).get("e") == "aggTrade", timeout=15)
    finally:
        reader.close()

    assert answers == [{"result": None, "id": 1}] and sorted(listed["result"]) == sorted(names)
    depth = [event(m) for m in seen if event(m).get("e") == "depthUpdate"][-1]
    assert (depth["s"], depth["a"]) == ("BTCUSDT", [["100.000000", "0.01000000"]])  # the book after the trade
    [rest] = requests.get(f"http://{stream_servers.webs[0]}/api/v3/aggTrades?symbol=BTCUSDT", timeout=30).json()
    aggregate = event(seen[-1])
    assert {k: aggregate[k] for k in rest} == rest and (aggregate["q"], aggregate["m"]) == ("0.02000000", False)
    if combined:
        assert {m["stream"] for m in seen} == set(names)


def test_one_address_holds_at_most_its_share_of_connections_and_gets_one_back_when_it_closes_one(
    stream_servers, btc_usdt, tmp_path
):
    """Break-it review: 900 connections from one address were all accepted by the one process serving everyone."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    from .processes import start_web

    process, web = start_web(tmp_path, "limited", env={"STREAMS_CONNECTIONS_PER_ADDRESS": "2"})
    try:
        first, second = (StreamReader(f"ws://{web}/ws/btcusdt@trade") for _ in range(2))
        with pytest.raises(InvalidStatus) as refused:
            connect(f"ws://{web}/ws/btcusdt@trade", open_timeout=10)
        first.close()
        deadline = time.monotonic() + 10
        while True:  # the server counts the connection gone once it has seen it close
            try:
                third = StreamReader(f"ws://{web}/ws/btcusdt@depth")
                break
            except InvalidStatus:
                assert time.monotonic() < deadline, "a closed connection was never given back"
                time.sleep(0.05)
        third.connection.send(json.dumps({"method": "LIST_SUBSCRIPTIONS", "id": 1}))
        listed = third.wait_for(lambda message: message.get("id") == 1)[-1]
        second.close()
        third.close()
    finally:
        process.stop()

    assert refused.value.response.status_code == 403
    assert listed == {"result": ["btcusdt@depth"], "id": 1}


def test_a_connection_past_its_message_budget_is_told_and_closed_and_one_within_it_is_not(stream_servers, btc_usdt):
    """Break-it review: 200 frames in a burst were each answered (each SUBSCRIBE reads the database); Binance allows
    5 messages a second and disconnects past it. Here bursts of 10 pass, at 5 a second."""
    web = stream_servers.webs[0]
    steady = StreamReader(f"ws://{web}/ws/btcusdt@trade")
    flood = StreamReader(f"ws://{web}/ws/btcusdt@trade")
    try:
        for request_id in range(14):  # a burst of 10, then 2 a second: within the budget
            steady.connection.send(json.dumps({"method": "LIST_SUBSCRIPTIONS", "id": request_id}))
            time.sleep(0 if request_id < 9 else 0.5)
        answered = steady.wait_for(lambda message: message.get("id") == 13)
        for request_id in range(30):
            flood.connection.send(json.dumps({"method": "LIST_SUBSCRIPTIONS", "id": request_id}))
        flooded = flood.wait_for(lambda message: "error" in message)
        deadline = time.monotonic() + 10
        while flood.closed_code is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        steady.close()
        flood.close()

    assert [message["id"] for message in answered] == list(range(14))
    assert [message["id"] for message in flooded[:-1]] == list(range(10))
    assert flooded[-1]["error"]["code"] == -1003 and "5 messages a second" in flooded[-1]["error"]["msg"]
    assert flood.closed_code == 1008


def rest_place(web: str, key: str, side: str, price: str) -> None:
    body = {"market": "BTC-USDT", "side": side, "type": "limit", "price": price, "qty": "0.02"}
    response = requests.post(
        f"http://{web}/api/v1/orders/", json=body, headers={"Authorization": f"Token {key}"}, timeout=30
    )
    assert response.status_code == 201, response.text


def test_partial_depth_streams_push_the_best_levels_as_the_rest_depth_shows_them(stream_servers, btc_usdt, btc, usdt):
    """Break-it review: ``btcusdt@depth5`` and Binance's other partial book depth streams were refused. A connection
    open while the book changes and one opened after it (the every-second push) both reach the book's last update."""
    webs = stream_servers.webs
    names = ["btcusdt@depth5", "btcusdt@depth10@100ms", "btcusdt@depth20@1000ms"]
    url = f"ws://{webs[0]}/stream?streams={'/'.join(names)}"
    before = StreamReader(url)
    try:
        buyer, seller = trader(btc, usdt)[1], trader(btc, usdt)[1]
        for n in range(12):  # 12 levels a side: more than 5 and 10, fewer than 20
            rest_place(webs[n % 2], buyer, "buy", f"{90 + n * 0.25:.2f}")
            rest_place(webs[n % 2], seller, "sell", f"{110 - n * 0.25:.2f}")
        final = rest_depth(webs[1])
        after = StreamReader(url)
        try:
            pushed = {}
            for reader in (before, after):
                latest: dict[str, dict] = {}

                def at_final(message, latest=latest) -> bool:
                    latest[message["stream"]] = message["data"]
                    return all(latest.get(name, {}).get("lastUpdateId") == final["last_update_id"] for name in names)

                reader.wait_for(at_final, timeout=30)
                pushed[reader] = latest
        finally:
            after.close()
    finally:
        before.close()

    bids, asks = rest_levels(final)
    assert (len(bids), len(asks), final["last_update_id"]) == (12, 12, 24)
    for latest in pushed.values():
        for name, levels in zip(names, (5, 10, 20), strict=True):
            data = latest[name]
            assert set(data) == {"lastUpdateId", "bids", "asks"}
            assert [[D(p), D(q)] for p, q in data["bids"]] == bids[:levels]
            assert [[D(p), D(q)] for p, q in data["asks"]] == asks[:levels]
