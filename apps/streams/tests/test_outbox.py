"""The outbox rows the services write, in their own transactions, and the events the relay makes of them."""

import json
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection

from apps.core.errors import InvalidState
from apps.ledger.errors import InsufficientFunds
from apps.ledger.tests.factories import AssetFactory, UserFactory, fund
from apps.orders.models import Market, Trade
from apps.orders.services import market_create, market_halt, market_resume, order_cancel, order_place
from apps.streams.models import StreamEvent
from apps.streams.relay import Relay
from apps.wallets.custody.simnet import new_address
from apps.wallets.tests.factories import book_address

D = Decimal


@pytest.fixture
def traders(btc_usdt, btc, usdt):
    maker, taker = UserFactory(), UserFactory()
    fund(maker, btc, "10")
    fund(taker, usdt, "100000")
    return maker, taker


def book_events() -> list[StreamEvent]:
    return list(StreamEvent.objects.filter(kind="book").order_by("id"))


def test_every_book_change_records_one_event_numbered_by_the_market_sequence(traders, btc_usdt):
    maker, taker = traders
    first = order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="100", qty="0.5")
    order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="101", qty="0.5")
    order_place(user_id=taker.id, market="BTC-USDT", side="buy", price="101", qty="0.7")  # takes 0.5 + 0.2
    with pytest.raises(InvalidState):
        order_cancel(order_id=first.id, user_id=maker.id)  # already filled: refused, nothing recorded
    market_halt(market_id=btc_usdt.id, operator_id=UserFactory().id, reason="test")
    market_resume(market_id=btc_usdt.id, operator_id=UserFactory().id, reason="test")
    market_halt(market_id=btc_usdt.id, operator_id=UserFactory().id, reason="test")
    market_halt(
        market_id=btc_usdt.id, operator_id=UserFactory().id, reason="test"
    )  # already halted: no change, no event

    events = book_events()
    assert (
        [event.update_id for event in events] == [1, 2, 3, 4, 5, 6] == list(range(1, Market.objects.get().sequence + 1))
    )
    take = events[2].payload
    assert take["levels"] == [
        ["buy", "101.000000000000000000", "0"],  # the taker's price: it did not rest
        ["sell", "100.000000000000000000", "0"],  # filled: gone
        ["sell", "101.000000000000000000", "0.300000000000000000"],
    ]
    assert [(t["price"], t["qty"], t["taker_side"]) for t in take["trades"]] == [
        ("100.000000000000000000", "0.500000000000000000", "buy"),
        ("101.000000000000000000", "0.200000000000000000", "buy"),
    ]
    assert take["bid"] is None and take["ask"] == ["101.000000000000000000", "0.300000000000000000"]
    assert [(o["id"], o["status"]) for o in take["orders"]] == [
        (first.id, "filled"),
        (first.id + 1, "partially_filled"),
        (first.id + 2, "filled"),
    ]
    assert events[3].payload["levels"] == [] and events[3].payload["trades"] == []


def test_a_refused_placement_records_nothing_and_a_replay_records_an_empty_change(traders):
    maker, taker = traders
    with pytest.raises(InsufficientFunds):
        order_place(user_id=taker.id, market="BTC-USDT", side="buy", price="200", qty="999")
    assert not StreamEvent.objects.exists()

    order = order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="100", qty="0.5", client_order_id="a")
    again = order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="100", qty="0.5", client_order_id="a")

    assert again.id == order.id
    assert [(e.update_id, e.payload["levels"]) for e in book_events()][1] == (2, [])
    assert Market.objects.get().sequence == 2


def test_with_publishing_off_nothing_is_recorded(traders, settings):
    settings.STREAMS_PUBLISH = False
    maker, _ = traders
    order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="100", qty="0.5")
    assert not StreamEvent.objects.exists()


def relay_rows() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, kind, market_id, update_id, user_id, object_id, payload FROM streams_streamevent ORDER BY id"
        )
        return cursor.fetchall()


def relay_messages() -> list[tuple[str, dict]]:
    messages = Relay().messages(relay_rows())
    return [(group, {**message, "data": json.loads(message["data"])}) for group, message in messages]


def test_the_relay_merges_consecutive_changes_into_one_depth_update_and_sends_each_user_only_theirs(traders):
    maker, taker = traders
    order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="100", qty="0.5")
    order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="100.5", qty="0.25")
    taken = order_place(user_id=taker.id, market="BTC-USDT", side="buy", price="100", qty="0.2")

    messages = relay_messages()

    depth = [m for g, m in messages if g == "market.btcusdt.depth"]
    assert len(depth) == 1
    assert (depth[0]["first"], depth[0]["last"]) == (1, 3)
    assert {k: depth[0]["data"][k] for k in ("e", "s", "U", "u", "b", "a")} == {
        "e": "depthUpdate",
        "s": "BTCUSDT",
        "U": 1,
        "u": 3,
        "b": [["100.000000", "0.00000000"]],  # the taker's price: nothing rests there
        "a": [["100.000000", "0.30000000"], ["100.500000", "0.25000000"]],
    }
    trade = next(m["data"] for g, m in messages if g == "market.btcusdt.trade")
    assert (trade["t"], trade["p"], trade["q"], trade["m"]) == (taken.id * 10**6 + 1, "100.000000", "0.20000000", False)
    ticker = [m["data"] for g, m in messages if g == "market.btcusdt.bookTicker"]
    assert ticker == [
        {"u": 3, "s": "BTCUSDT", "b": "0.000000", "B": "0.00000000", "a": "100.000000", "A": "0.30000000"}
    ]
    taker_reports = [
        m["data"] for g, m in messages if g == f"user.{taker.id}" and m["data"].get("e") == "executionReport"
    ]
    assert [(r["i"], r["x"], r["X"], r["n"], r["N"]) for r in taker_reports] == [
        (taken.id, "NEW", "NEW", "0", None),
        (taken.id, "TRADE", "FILLED", "0.00020000", "BTC"),
    ]
    assert [(r["l"], r["L"], r["Y"], r["Z"], r["w"], "W" in r) for r in taker_reports] == [
        ("0.00000000", "0.000000", "0.000000", "0.000000", True, True),
        ("0.20000000", "100.000000", "20.000000", "20.000000", False, False),
    ]
    assert taker_reports[0]["W"] == taker_reports[0]["O"]
    assert {(r["P"], r["F"], r["g"], r["o"], r["V"]) for r in taker_reports} == {
        ("0.000000", "0.00000000", -1, "LIMIT", "EXPIRE_TAKER")
    }
    maker_reports = [
        m["data"] for g, m in messages if g == f"user.{maker.id}" and m["data"].get("e") == "executionReport"
    ]
    assert {r["i"] for r in maker_reports} == {taken.id - 2, taken.id - 1}
    assert not {r["i"] for r in maker_reports} & {taken.id}
    positions = {g: m["data"]["B"] for g, m in messages if m["data"].get("e") == "outboundAccountPosition"}
    assert positions[f"user.{taker.id}"] == [
        {"a": "BTC", "f": "0.19980000", "l": "0.00000000"},
        {"a": "USDT", "f": "99980.000000", "l": "0.000000"},
    ]


def test_a_post_only_order_is_reported_as_limit_maker_with_its_self_trade_prevention_mode(traders):
    maker, _ = traders
    order_place(
        user_id=maker.id, market="BTC-USDT", side="sell", price="100", qty="0.5", post_only=True, stp="expire_both"
    )
    (report,) = [
        m["data"] for g, m in relay_messages() if g == f"user.{maker.id}" and m["data"].get("e") == "executionReport"
    ]
    assert (report["o"], report["x"], report["V"], report["w"]) == ("LIMIT_MAKER", "NEW", "EXPIRE_BOTH", True)


def test_an_order_expired_by_self_trade_prevention_is_reported_as_binance_does(traders, usdt):
    """Binance: execution type TRADE_PREVENTION, status EXPIRED_IN_MATCH (what GET /order shows too)."""
    maker, _ = traders
    fund(maker, usdt, "1000")
    resting = order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="100", qty="0.5")
    relay_messages()
    own = order_place(user_id=maker.id, market="BTC-USDT", side="buy", price="100", qty="0.1", stp="expire_maker")
    reports = {
        m["data"]["i"]: m["data"]
        for g, m in relay_messages()
        if g == f"user.{maker.id}" and m["data"].get("e") == "executionReport"
    }
    assert (reports[resting.id]["x"], reports[resting.id]["X"], reports[resting.id]["w"]) == (
        "TRADE_PREVENTION",
        "EXPIRED_IN_MATCH",
        False,
    )
    assert (reports[own.id]["x"], reports[own.id]["X"], reports[own.id]["V"]) == ("NEW", "NEW", "EXPIRE_MAKER")


def test_deposit_reports_and_withdrawal_transitions_reach_only_their_users_stream(btc, usdt, user):
    from apps.wallets.services import (
        custody_event_process,
        custody_event_receive,
        deposit_address_get_or_create,
        withdrawal_cancel,
        withdrawal_request,
    )
    from apps.wallets.tests.factories import deposit_payload, signed

    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=0, withdrawal_daily_limit=1000)
    address = deposit_address_get_or_create(user_id=user.id, asset=btc).address
    type(btc).objects.filter(pk=btc.pk).update(confirmations_required=1)
    event, _ = custody_event_receive(body=signed(deposit_payload(address, "1.5", txid="d1", confirmations=1))[0])
    custody_event_process(event_pk=event.pk)
    fund(user, usdt, "100")
    destination = book_address(user, "USDT", new_address()).address  # not our BTC deposit address
    withdrawal = withdrawal_request(user_id=user.id, asset_code="USDT", amount="30", address=destination)
    withdrawal_cancel(withdrawal_id=withdrawal.id, user_id=user.id)

    messages = relay_messages()

    assert {group for group, _ in messages} == {f"user.{user.id}"}
    data = [message["data"] for _, message in messages]
    deposit = next(d["d"] for d in data if d["e"] == "depositUpdate")
    assert (deposit["asset"], deposit["amount"], deposit["status"]) == ("BTC", "1.50000000", "credited")
    statuses = [d["w"]["status"] for d in data if d["e"] == "withdrawalUpdate"]
    assert statuses == ["cancelled"]  # awaiting approval, then cancelled: published once, as it is now
    position = next(d["B"] for d in data if d["e"] == "outboundAccountPosition")
    assert position == [
        {"a": "BTC", "f": "1.50000000", "l": "0.00000000"},
        {"a": "USDT", "f": "100.000000", "l": "0.000000"},
    ]


def test_a_new_log_in_and_a_new_api_key_reach_only_their_users_stream(client, user):
    """Issue 14's notifications on the user stream (e-mail has them too): a log-in with its address and browser,
    an API key with its name and scopes."""
    from apps.accounts.services import api_key_create

    other = UserFactory()
    client.post(
        "/accounts/login/",
        {"username": user.username, "password": "correct horse battery staple"},
        REMOTE_ADDR="203.0.113.9",
        HTTP_USER_AGENT="pytest-browser",
    )
    api_key_create(user_id=user.id, name="bot", scopes=["read", "trade"])

    messages = relay_messages()

    assert {group for group, _ in messages} == {f"user.{user.id}"} and f"user.{other.id}" not in str(messages)
    notices = [message["data"] for _, message in messages if message["data"]["e"] == "accountNotice"]
    assert [{k: v for k, v in notice.items() if k != "E"} for notice in notices] == [
        {"e": "accountNotice", "notice": "login", "ip_address": "203.0.113.9", "user_agent": "pytest-browser"},
        {"e": "accountNotice", "notice": "api_key_created", "name": "bot", "scopes": "read,trade"},
    ]


def test_a_log_in_behind_the_trusted_proxy_is_noticed_with_the_clients_address(client, user, settings):
    """Review: the notice gave ``REMOTE_ADDR``, the proxy's own address behind one (README, "Behind the proxy":
    ``TRUSTED_PROXY_COUNT=1``); it is the client's, as the rate limits and lockouts see it (``exchange.client_ip``),
    never what the client wrote in ``X-Forwarded-For`` itself."""
    settings.TRUSTED_PROXY_COUNT = 1
    client.post(
        "/accounts/login/",
        {"username": user.username, "password": "correct horse battery staple"},
        REMOTE_ADDR="10.0.0.2",  # the proxy
        HTTP_X_FORWARDED_FOR="198.51.100.66, 203.0.113.9",  # what the client wrote, then what the proxy appended
        HTTP_USER_AGENT="pytest-browser",
    )

    notices = [message["data"] for _, message in relay_messages() if message["data"]["e"] == "accountNotice"]

    assert [(notice["notice"], notice["ip_address"]) for notice in notices] == [("login", "203.0.113.9")]


def test_trades_publish_the_candles_they_went_into_and_mark_the_ticker_due(traders, btc_usdt):
    from apps.marketdata.selectors import ticker_24h
    from apps.streams import events

    maker, taker = traders
    order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="100", qty="0.5")
    order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="102", qty="0.5")
    order_place(user_id=taker.id, market="BTC-USDT", side="buy", price="102", qty="0.7")

    relay = Relay()
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, kind, market_id, update_id, user_id, object_id, payload FROM streams_streamevent")
        messages = relay.messages(sorted(cursor.fetchall()))

    klines = {group: json.loads(m["data"])["k"] for group, m in messages if ".kline_" in group}
    assert set(klines) == {
        f"market.btcusdt.kline_{i}"
        for i in ("1m", "3m", "5m", "15m", "30m", "1h", "2h", "4h", "6h", "8h", "12h", "1d", "3d", "1w", "1M")
    }
    one_minute = klines["market.btcusdt.kline_1m"]
    assert {k: one_minute[k] for k in ("i", "o", "h", "l", "c", "v", "q", "n", "x")} == {
        "i": "1m",
        "o": "100.000000",
        "h": "102.000000",
        "l": "100.000000",
        "c": "102.000000",
        "v": "0.70000000",
        "q": "70.400000",
        "n": 2,
        "x": False,
    }
    assert one_minute["T"] - one_minute["t"] == 59_999
    taker_order = Trade.objects.get(seq=1).taker_order_id
    for kline in klines.values():  # Binance's trade ids and taker buy volumes: the taker bought both fills
        assert {k: kline[k] for k in ("f", "L", "V", "Q", "B")} == {
            "f": taker_order * 10**6 + 1,
            "L": taker_order * 10**6 + 2,
            "V": "0.70000000",
            "Q": "70.400000",
            "B": "0",
        }
    assert relay.tickers_due == {btc_usdt.id}

    ticker = events.ticker_24h(relay.market(btc_usdt.id), ticker_24h(market="BTC-USDT"), 0)
    assert {k: ticker[k] for k in ("e", "s", "p", "P", "w", "c", "o", "h", "l", "v", "q", "a", "A", "b", "n")} == {
        "e": "24hrTicker",
        "s": "BTCUSDT",
        "p": "2.000000",
        "P": "2.00",
        "w": "100.571429",  # 70.4 / 0.7, half-even at the quote precision
        "c": "102.000000",
        "o": "100.000000",
        "h": "102.000000",
        "l": "100.000000",
        "v": "0.70000000",
        "q": "70.400000",
        "a": "102.000000",
        "A": "0.30000000",
        "b": "0.000000",
        "n": 2,
    }
    # Binance's mini ticker: the same window's time, symbol, last, open, high, low and volumes (checked above)
    mini = events.mini_ticker(ticker)
    assert mini == {"e": "24hrMiniTicker", **{k: ticker[k] for k in ("E", "s", "c", "o", "h", "l", "v", "q")}}
    assert {k: ticker[k] for k in ("x", "Q", "F", "L")} == {
        "x": "0.000000",  # no trade before the window
        "Q": "0.20000000",  # the last fill's quantity
        "F": taker_order * 10**6 + 1,
        "L": taker_order * 10**6 + 2,
    }


def test_a_ticker_that_cannot_be_read_is_logged_and_leaves_the_relay_running(traders, btc_usdt, caplog):
    maker, _ = traders
    order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="100", qty="0.5")
    relay = Relay()
    relay.messages(relay_rows())
    relay.markets[btc_usdt.id] = replace(relay.markets[btc_usdt.id], symbol="DOGE-USDT")  # names no market

    relay.tickers()

    assert "stream relay tickers failed" in caplog.text
    assert relay.tickers_due == set()  # taken; the next book change makes it due again


def test_every_market_that_traded_gets_its_current_candles_every_push_with_or_without_trades(traders, btc_usdt, usdt):
    from apps.marketdata.selectors import candles_latest

    maker, taker = traders
    order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="100", qty="0.5")
    order_place(user_id=taker.id, market="BTC-USDT", side="buy", price="100", qty="0.5")
    eth = AssetFactory(code="ETH", name="Ether", decimals=8)
    market_create(  # never traded
        base=eth, quote=usdt, tick_size=D("0.01"), step_size=D("0.001"), min_qty=D("0.001"), max_qty=D("1000")
    )
    traded = {k.interval: k for k in candles_latest(market_id=btc_usdt.id)}
    relay = Relay()

    def pushed(now) -> list[tuple[str, dict]]:
        return [(group.rsplit("_", 1)[1], json.loads(m["data"])["k"]) for group, m in relay.kline_messages(now)]

    first = pushed(traded["1m"].open_time + timedelta(seconds=30))
    assert {interval for interval, _ in first} == set(traded) and len(first) == len(traded)
    assert {interval: (k["t"], k["n"], k["c"], k["x"]) for interval, k in first} == {
        interval: (int(k.open_time.timestamp() * 1000), 1, "100.000000", False) for interval, k in traded.items()
    }

    later = traded["1m"].open_time + timedelta(minutes=2, seconds=5)  # no trade since
    second = [k for interval, k in pushed(later) if interval == "1m"]
    assert [(k["t"], k["x"], k["n"], k["f"] > 0) for k in second] == [
        (int(traded["1m"].open_time.timestamp() * 1000), True, 1, True),  # the minute it left, closed
        (int((traded["1m"].open_time + timedelta(minutes=2)).timestamp() * 1000), False, 0, False),
    ]
    assert {k: second[1][k] for k in ("o", "h", "l", "c", "v", "q", "f", "L")} == {
        "o": "100.000000",
        "h": "100.000000",
        "l": "100.000000",
        "c": "100.000000",
        "v": "0.00000000",
        "q": "0.000000",
        "f": -1,
        "L": -1,
    }
    again = [k for interval, k in pushed(later) if interval == "1m"]
    assert [(k["t"], k["x"]) for k in again] == [(second[1]["t"], False)]  # the closed one is sent once


def test_the_derived_intervals_streams_carry_binance_bucket_times_per_trade_and_every_push(traders, btc_usdt):
    """``kline_30m`` and ``kline_1M``, read from the 15m and 1d candles: ``t`` the bucket's open (a half hour on the
    epoch, the month's first day), ``T`` the next bucket's open - 1 ms, figures and ``f``/``L`` of the trades."""
    maker, taker = traders
    order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="100", qty="0.5")
    order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="102", qty="0.5")
    order_place(user_id=taker.id, market="BTC-USDT", side="buy", price="102", qty="0.7")
    trade = Trade.objects.get(seq=1)
    half_hour = trade.created_at.replace(minute=trade.created_at.minute // 30 * 30, second=0, microsecond=0)
    month = trade.created_at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    next_month = month.replace(year=month.year + month.month // 12, month=month.month % 12 + 1)

    def ms(moment) -> int:
        return int(moment.timestamp() * 1000)

    relay = Relay()
    messages = relay.messages(relay_rows())
    klines = {group.rsplit("_", 1)[1]: json.loads(m["data"])["k"] for group, m in messages if ".kline_" in group}
    figures = ("i", "t", "T", "o", "h", "l", "c", "v", "q", "n", "x", "f", "L")
    traded = {"o": "100.000000", "h": "102.000000", "l": "100.000000", "c": "102.000000", "v": "0.70000000"}
    numbers = {"q": "70.400000", "n": 2, "x": False, "f": trade.number, "L": trade.number + 1}
    assert {k: klines["30m"][k] for k in figures} == {
        "i": "30m",
        "t": ms(half_hour),
        "T": ms(half_hour) + 1_800_000 - 1,
        **traded,
        **numbers,
    }
    assert {k: klines["1M"][k] for k in figures} == {
        "i": "1M",
        "t": ms(month),
        "T": ms(next_month) - 1,
        **traded,
        **numbers,
    }

    def pushed(now) -> list[dict]:
        return [json.loads(m["data"])["k"] for group, m in relay.kline_messages(now) if group.endswith("kline_30m")]

    assert [k["t"] for k in pushed(trade.created_at)] == [ms(half_hour)]
    left = pushed(half_hour + timedelta(minutes=30, seconds=1))
    assert [(k["t"], k["T"], k["x"], k["n"], k["c"], k["v"]) for k in left] == [
        (ms(half_hour), ms(half_hour) + 1_799_999, True, 2, "102.000000", "0.70000000"),  # the half hour it left
        (ms(half_hour) + 1_800_000, ms(half_hour) + 3_599_999, False, 0, "102.000000", "0.00000000"),  # flat
    ]


def test_agg_trade_events_are_the_rest_aggregate_trades_of_the_change(traders, btc, client):
    """Binance's ``<symbol>@aggTrade`` stream (break-it review: bots subscribing to it were refused): one event per run
    of a taker's fills at one price, the rows ``GET /api/v3/aggTrades`` answers, ids and sums to the letter."""
    maker, taker = traders
    other = UserFactory()
    fund(other, btc, "1")
    order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="100", qty="0.2")
    order_place(user_id=other.id, market="BTC-USDT", side="sell", price="100", qty="0.3")
    order_place(user_id=maker.id, market="BTC-USDT", side="sell", price="101", qty="0.5")
    order_place(user_id=taker.id, market="BTC-USDT", side="buy", price="101", qty="0.7")

    with connection.cursor() as cursor:
        cursor.execute("SELECT id, kind, market_id, update_id, user_id, object_id, payload FROM streams_streamevent")
        messages = Relay().messages(sorted(cursor.fetchall()))

    events = [json.loads(m["data"]) for group, m in messages if group == "market.btcusdt.aggTrade"]
    rest = client.get("/api/v3/aggTrades", {"symbol": "BTCUSDT"}).json()
    assert [(e["a"], e["p"], e["q"], e["f"], e["l"], e["m"]) for e in events] == [
        (r["a"], r["p"], r["q"], r["f"], r["l"], r["m"]) for r in rest
    ]
    assert [(e["e"], e["s"], e["p"], e["q"], e["l"] - e["f"], e["m"]) for e in events] == [
        ("aggTrade", "BTCUSDT", "100.000000", "0.50000000", 1, False),
        ("aggTrade", "BTCUSDT", "101.000000", "0.20000000", 0, False),
    ]
