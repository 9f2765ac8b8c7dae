"""The market data endpoints: candles, tickers, server time; their answers' formats and refusals."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from apps.marketdata.services import candles_record
from apps.marketdata.tests.helpers import at, fill
from apps.orders.tests.helpers import place


@pytest.fixture
def traded(btc_usdt, funded_user):
    """A buy of 0.1 at 59,900 (limit 60,000), a bid of 0.2 at 59,000 and an ask of 0.5 at 61,000 left resting."""
    maker, taker = funded_user(btc="1", usdt="100000"), funded_user(usdt="100000")
    place(maker, side="sell", price="59900", qty="0.1")
    place(taker, side="buy", price="60000", qty="0.1")
    place(maker, side="buy", price="59000", qty="0.2")
    place(maker, side="sell", price="61000", qty="0.5")
    return btc_usdt


def test_candles_are_formatted_at_the_assets_precisions(traded, api):
    response = api.get("/api/v1/markets/BTC-USDT/candles/", {"interval": "1d"})

    assert response.status_code == 200
    (candle,) = response.json()
    today = timezone.now().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    assert candle == {
        "open_time": today.isoformat().replace("+00:00", "Z"),
        "close_time": (today + timedelta(days=1) - timedelta(microseconds=1)).isoformat().replace("+00:00", "Z"),
        "open": "59900.000000",
        "high": "59900.000000",
        "low": "59900.000000",
        "close": "59900.000000",
        "volume": "0.10000000",
        "quote_volume": "5990.000000",
        "trades": 1,
    }


def test_candles_window_in_the_query(btc_usdt, api):
    for minute in range(5):
        candles_record(market_id=btc_usdt.id, time=at(f"2026-12-01T12:0{minute}:30"), fills=[fill("100.00", "0.0100")])

    response = api.get(
        "/api/v1/markets/BTC-USDT/candles/",
        {"interval": "1m", "start": "2026-12-01T12:01:00Z", "end": "2026-12-01T13:04:00+01:00", "limit": "2"},
    )

    assert [c["open_time"] for c in response.json()] == ["2026-12-01T12:01:00Z", "2026-12-01T12:02:00Z"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({}, "interval"),
        ({"interval": "2m"}, "interval"),  # 3m is one of Binance's, derived from 1m: served
        ({"interval": "1s"}, "interval"),
        ({"interval": "1m", "limit": "0"}, "limit"),
        ({"interval": "1m", "limit": "1001"}, "limit"),
        ({"interval": "1m", "limit": "ten"}, "limit"),
        ({"interval": "1m", "start": "12:00"}, "start"),
        ({"interval": "1m", "start": "2026-12-02T00:00:00Z", "end": "2026-12-01T00:00:00Z"}, "end"),
        ({"interval": "1m", "cursor": "x"}, "cursor"),  # candles are not a paginated list
    ],
)
def test_bad_candle_queries_are_400_naming_the_field(btc_usdt, api, query, field):
    response = api.get("/api/v1/markets/BTC-USDT/candles/", query)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert list(response.json()["error"]["fields"]) == [field]


def test_unknown_market_is_404(db, api):
    assert api.get("/api/v1/markets/NOPE-USDT/candles/", {"interval": "1m"}).status_code == 404
    assert api.get("/api/v1/markets/NOPE-USDT/ticker/").json()["error"]["code"] == "not_found"


def test_ticker(traded, api):
    body = api.get("/api/v1/markets/BTC-USDT/ticker/").json()

    assert {key: value for key, value in body.items() if key not in ("open_time", "close_time")} == {
        "symbol": "BTC-USDT",
        "last": "59900.000000",
        "open": "59900.000000",
        "high": "59900.000000",
        "low": "59900.000000",
        "change": "0.000000",
        "change_percent": "0.00",
        "volume": "0.10000000",
        "quote_volume": "5990.000000",
        "trades": 1,
        "bid": "59000.000000",
        "bid_qty": "0.20000000",
        "ask": "61000.000000",
        "ask_qty": "0.50000000",
    }
    close = datetime.fromisoformat(body["close_time"])
    assert close - datetime.fromisoformat(body["open_time"]) == timedelta(hours=24)


def test_tickers_of_every_market(traded, api):
    body = api.get("/api/v1/tickers/").json()

    assert [(t["symbol"], t["last"], t["volume"]) for t in body] == [("BTC-USDT", "59900.000000", "0.10000000")]


def test_server_time(db, api):
    before = timezone.now()
    body = api.get("/api/v1/time/").json()

    assert before <= datetime.fromisoformat(body["time"]) <= timezone.now()
    assert body["time"].endswith("Z")
