"""The private user stream against the live servers: a user's own events, and never anyone else's."""

import contextlib
import os
import signal
import time
from datetime import timedelta

import pytest
import requests
from django.db import connection
from django.utils import timezone

from apps.accounts.models import ApiKey
from apps.accounts.services import api_key_create, api_key_revoke
from apps.core.errors import NotFound
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.services import order_cancel, order_place
from apps.streams.models import StreamEvent
from apps.streams.services import stream_token_create, stream_token_extend, stream_token_revoke
from apps.wallets.custody.simnet import new_address
from apps.wallets.services import withdrawal_request
from apps.wallets.tests.factories import book_address

from .clients import StreamReader
from .processes import start_relay, start_web

pytestmark = pytest.mark.django_db(transaction=True)


def stream_key(web: str, user) -> str:
    """A stream key asked for over the API with a read-only API key."""
    api_key = api_key_create(user_id=user.id, name="read", scopes=["read"])[1]
    response = requests.post(
        f"http://{web}/api/v1/stream-token/", headers={"Authorization": f"Token {api_key}"}, timeout=30
    )
    assert response.status_code == 201, response.text
    return response.json()["token"]


def funded(btc, usdt):
    user = UserFactory()
    fund(user, btc, "10")
    fund(user, usdt, "100000")
    return user


def test_a_user_stream_carries_the_users_orders_fills_balances_and_withdrawals_and_nobody_elses(
    stream_servers, btc_usdt, btc, usdt
):
    web1, web2 = stream_servers.webs
    alice, bob, carol = funded(btc, usdt), funded(btc, usdt), funded(btc, usdt)
    alice_stream = StreamReader(f"ws://{web1}/ws/{stream_key(web1, alice)}")
    bob_key = stream_key(web2, bob)
    bob_stream = StreamReader(f"ws://{web2}/stream?streams={bob_key}/btcusdt@trade")
    try:
        resting = order_place(user_id=alice.id, market="BTC-USDT", side="sell", price="100", qty="0.5")
        order_place(user_id=carol.id, market="BTC-USDT", side="buy", price="100", qty="0.2")  # fills alice in part
        carols = order_place(user_id=carol.id, market="BTC-USDT", side="buy", price="90", qty="1")
        order_cancel(order_id=carols.id, user_id=carol.id)
        bobs = order_place(user_id=bob.id, market="BTC-USDT", side="buy", price="80", qty="1", client_order_id="bid-1")
        order_cancel(order_id=bobs.id, user_id=bob.id, cancel_client_order_id="bid-1-undo")
        withdrawal = withdrawal_request(
            user_id=alice.id, asset_code="USDT", amount="25", address=book_address(alice, "USDT", new_address()).address
        )

        held_for_withdrawal = {"a": "USDT", "f": "99994.980000", "l": "25.000000"}  # 100,000 + 20 - 0.02 fee - 25
        alice_events = alice_stream.wait_for(
            lambda event: event["e"] == "outboundAccountPosition" and held_for_withdrawal in event["B"]
        )
        bob_events = bob_stream.wait_for(
            lambda message: message["data"].get("e") == "executionReport" and message["data"]["x"] == "CANCELED"
        )
    finally:
        alice_stream.close()
        bob_stream.close()

    reports = [event for event in alice_events if event["e"] == "executionReport"]
    assert {report["i"] for report in reports} == {resting.id}
    assert [(r["x"], r["X"], r["l"], r["z"]) for r in reports] == [
        ("NEW", "NEW", "0.00000000", "0.00000000"),  # l was "0", not at the precision
        ("TRADE", "PARTIALLY_FILLED", "0.20000000", "0.20000000"),
    ]
    assert [(r["r"], r["C"]) for r in reports] == [("NONE", ""), ("NONE", "")]
    assert reports[1]["m"] is True and reports[1]["n"] == "0.020000" and reports[1]["N"] == "USDT"
    withdrawals = [event["w"] for event in alice_events if event["e"] == "withdrawalUpdate"]
    assert [(w["id"], w["status"], w["amount"]) for w in withdrawals] == [(withdrawal.id, "approved", "25.000000")]

    bob_reports = [m["data"] for m in bob_events if m["stream"] == bob_key]
    assert {report["i"] for report in bob_reports if report["e"] == "executionReport"} == {bobs.id}
    assert [(r["x"], r["r"], r["c"], r["C"]) for r in bob_reports if r["e"] == "executionReport"] == [
        ("NEW", "NONE", "bid-1", ""),
        ("CANCELED", "NONE", "bid-1-undo", "bid-1"),  # r was "cancelled", no C, and c not the cancel's own id
    ]
    assert all(m["stream"] in (bob_key, "btcusdt@trade") for m in bob_events)
    assert [m["data"]["q"] for m in bob_events if m["stream"] == "btcusdt@trade"] == ["0.20000000"]


def test_an_unknown_stream_key_or_stream_name_is_refused_with_the_reason(stream_servers, btc_usdt):
    web = stream_servers.webs[0]
    for path, field in (("/ws/" + "0" * 64, "streams"), ("/ws/btcusdt@nothing", "streams"), ("/elsewhere", "path")):
        reader = StreamReader(f"ws://{web}{path}")
        try:
            error = reader.wait_for(lambda message: "error" in message)[-1]
            reader.thread.join(timeout=10)
        finally:
            reader.close()
        assert error["error"]["code"] == 2 and field in error["error"]["fields"]  # Binance's "Invalid request"
        assert error["error"]["msg"] == error["error"]["message"]
        assert reader.closed_code == 4400


def closed(reader: StreamReader, timeout: float = 10) -> int | None:
    """The code ``reader``'s connection was closed with, waiting up to ``timeout`` s for it (``None``: still open)."""
    deadline = time.monotonic() + timeout
    while reader.closed_code is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return reader.closed_code


def test_an_expired_or_revoked_stream_key_closes_its_stream_with_listen_key_expired(tmp_path, btc_usdt, settings):
    """Binance's ``listenKeyExpired``, then close 4401: at the key's expiry, and within the check interval
    (0.5 s here) of a revocation; a stream whose key stays valid stays open."""
    web_process, web = start_web(tmp_path, "keys", env={"STREAMS_TOKEN_CHECK_SECONDS": "0.5"})
    user = UserFactory()
    settings.STREAMS_TOKEN_TTL = 4
    _, expiring = stream_token_create(user_id=user.id)
    settings.STREAMS_TOKEN_TTL = 3600
    _, revoked = stream_token_create(user_id=user.id)
    _, kept = stream_token_create(user_id=user.id)
    readers = [
        StreamReader(f"ws://{web}/ws/{expiring}"),
        StreamReader(f"ws://{web}/stream?streams=btcusdt@trade/{revoked}"),
        StreamReader(f"ws://{web}/ws/{kept}"),
    ]
    expiring_stream, revoked_stream, kept_stream = readers
    try:
        stream_token_revoke(user_id=user.id, key=revoked)
        (notice,) = revoked_stream.wait_for(lambda message: message["data"]["e"] == "listenKeyExpired", timeout=5)
        assert closed(revoked_stream) == 4401
        (event,) = expiring_stream.wait_for(lambda message: message["e"] == "listenKeyExpired", timeout=15)
        assert closed(expiring_stream) == 4401
        assert closed(kept_stream, timeout=1) is None
        assert kept_stream.take() == []
    finally:
        for reader in readers:
            reader.close()
        web_process.stop()

    assert notice["stream"] == revoked and notice["data"]["listenKey"] == revoked
    assert event["listenKey"] == expiring and isinstance(event["E"], int)


@contextlib.contextmanager
def session_relay_paused(stream_servers):
    """The session's relay stopped (SIGSTOP) and its database connection ended, so that it gives up the relay
    lock; on the way out it runs again, finds its connection gone and waits for the lock anew."""
    from apps.streams.relay import RELAY_LOCK_KEY

    group = stream_servers.relay.process.pid
    os.killpg(group, signal.SIGSTOP)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND objid = %s AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                [RELAY_LOCK_KEY],
            )
        yield
    finally:
        os.killpg(group, signal.SIGCONT)


def test_a_relay_killed_in_the_middle_of_a_round_sends_no_execution_report_twice_and_loses_none(
    stream_servers, tmp_path, btc_usdt, btc, usdt
):
    """A real relay process is killed (SIGKILL) while it publishes a round: the round did not commit, so the
    next relay publishes it again; the user stream sends each report once, in order, none missing."""
    alice, bob = funded(btc, usdt), funded(btc, usdt)
    orders = 200
    web = stream_servers.webs[0]
    alice_stream = StreamReader(f"ws://{web}/ws/{stream_key(web, alice)}")
    try:
        with session_relay_paused(stream_servers):
            asks = [
                order_place(user_id=alice.id, market="BTC-USDT", side="sell", price=str(100 + n), qty="0.01")
                for n in range(orders)
            ]
            for ask in asks:  # each buy fills one of alice's asks
                order_place(user_id=bob.id, market="BTC-USDT", side="buy", price=str(ask.price), qty="0.01")
            waiting = StreamEvent.objects.count()
            killed = start_relay(tmp_path, "killed", env={"STREAMS_RELAY_BATCH": str(waiting)})  # one round
            before_kill = alice_stream.wait_for(lambda event: event["e"] == "executionReport", timeout=60)
            os.killpg(killed.process.pid, signal.SIGKILL)
            killed.process.wait(timeout=10)
            time.sleep(0.5)  # what was on its way arrives
            before_kill += alice_stream.take()
            assert StreamEvent.objects.count() == waiting  # the round did not commit: it is published again
            relay = start_relay(tmp_path, "next")
            try:
                after = alice_stream.wait_for(
                    lambda event: (
                        event["e"] == "executionReport" and event["i"] == asks[-1].id and event["x"] == "TRADE"
                    ),
                    timeout=60,
                )
                time.sleep(0.5)  # a repeat, were one sent, would come by now
                after += alice_stream.take()
            finally:
                relay.stop()
    finally:
        alice_stream.close()

    delivered = [event for event in before_kill + after if event["e"] == "executionReport"]
    reports_before_kill = sum(event["e"] == "executionReport" for event in before_kill)
    assert 0 < reports_before_kill < 2 * orders  # killed in the middle of the round
    assert [(report["i"], report["x"]) for report in delivered] == [(ask.id, "NEW") for ask in asks] + [
        (ask.id, "TRADE") for ask in asks
    ]


def test_the_relay_publishes_a_commit_when_its_writer_rings_not_at_its_idle_timeout(
    stream_servers, tmp_path, btc_usdt, btc, usdt
):
    """This relay reads an idle outbox only every 600 s: the execution report arrives within the test's minute
    because the placement's commit rang it (:mod:`apps.core.doorbell`)."""
    alice = funded(btc, usdt)
    web = stream_servers.webs[0]
    alice_stream = StreamReader(f"ws://{web}/ws/{stream_key(web, alice)}")
    try:
        with session_relay_paused(stream_servers):
            relay = start_relay(tmp_path, "rung", env={"STREAMS_RELAY_IDLE_SECONDS": "600"})
            try:
                time.sleep(0.5)  # its first read of the outbox is done: it waits now
                ask = order_place(user_id=alice.id, market="BTC-USDT", side="sell", price="100", qty="0.01")
                events = alice_stream.wait_for(lambda event: event["e"] == "executionReport", timeout=60)
            finally:
                relay.stop()
    finally:
        alice_stream.close()

    assert [(e["i"], e["x"]) for e in events if e["e"] == "executionReport"] == [(ask.id, "NEW")]


def test_stream_keys_made_with_an_api_key_die_when_it_is_revoked_or_expires(tmp_path, btc_usdt):
    """Regression: a revoked (or expired) API key's stream keys and listenKeys kept open streams alive and opened
    new ones. Now its streams get ``listenKeyExpired`` and close 4401 within the check interval (0.5 s here), a
    new connection is refused, and keep-alives are refused; a browser session's stream key is unaffected."""
    web_process, web = start_web(tmp_path, "api-keys", env={"STREAMS_TOKEN_CHECK_SECONDS": "0.5"})
    user = UserFactory()
    revoked_key = api_key_create(user_id=user.id, name="revoked", scopes=["read"])
    expiring_key = api_key_create(user_id=user.id, name="expiring", scopes=["read"])
    token = requests.post(
        f"http://{web}/api/v1/stream-token/", headers={"Authorization": f"Token {revoked_key.raw_key}"}, timeout=30
    ).json()["token"]
    listen_key = requests.post(
        f"http://{web}/api/v3/userDataStream", headers={"X-MBX-APIKEY": revoked_key.raw_key}, timeout=30
    ).json()["listenKey"]
    expiring = requests.post(
        f"http://{web}/api/v3/userDataStream", headers={"X-MBX-APIKEY": expiring_key.raw_key}, timeout=30
    ).json()["listenKey"]
    _, session_key = stream_token_create(user_id=user.id)  # as for a browser session: no API key
    # The expiring key ends in 3 s (as one created with expires_in would, only sooner).
    ApiKey.objects.filter(pk=expiring_key.key.pk).update(expires_at=timezone.now() + timedelta(seconds=3))
    readers = [StreamReader(f"ws://{web}/ws/{name}") for name in (token, listen_key, expiring, session_key)]
    token_stream, listen_key_stream, expiring_stream, session_stream = readers
    try:
        assert closed(token_stream, timeout=1) is None and closed(listen_key_stream, timeout=0) is None

        api_key_revoke(user_id=user.id, key_id=revoked_key.key.pk)

        for stream, name in ((token_stream, token), (listen_key_stream, listen_key)):
            (notice,) = stream.wait_for(lambda message: message["e"] == "listenKeyExpired", timeout=5)
            assert notice["listenKey"] == name and closed(stream) == 4401
        (notice,) = expiring_stream.wait_for(lambda message: message["e"] == "listenKeyExpired", timeout=15)
        assert notice["listenKey"] == expiring and closed(expiring_stream) == 4401
        assert closed(session_stream, timeout=1) is None
        reopened = StreamReader(f"ws://{web}/ws/{token}")
        readers.append(reopened)
        (error,) = reopened.wait_for(lambda message: "error" in message)
        assert "Unknown or expired stream key" in error["error"]["message"] and closed(reopened) == 4400
    finally:
        for reader in readers:
            reader.close()
        web_process.stop()
    with pytest.raises(NotFound):  # nor kept alive from a session of the same user
        stream_token_extend(user_id=user.id, key=token)
    stream_token_extend(user_id=user.id, key=session_key)
