"""Public endpoints of /api/v3/ against Binance's documented shapes, with the values the fixture's trades give."""

import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.ledger.tests.factories import UserFactory
from apps.marketdata.tests.helpers import record_calendar
from apps.orders.models import Trade
from apps.orders.services import market_halt

pytestmark = pytest.mark.django_db


def get(client, path, **params):
    response = client.get(f"/api/v3/{path}", params)
    assert response["Content-Type"] == "application/json"
    return response


def test_ping_and_time(client):
    assert get(client, "ping").json() == {}
    body = get(client, "time").json()
    assert isinstance(body["serverTime"], int) and body["serverTime"] > 1_700_000_000_000


def test_exchange_info_lists_filters_and_limits(client, btc_usdt, settings):
    settings.BINANCE_REQUEST_WEIGHT_PER_MINUTE = 6000
    body = get(client, "exchangeInfo").json()
    assert body["timezone"] == "UTC"
    assert {"rateLimitType": "REQUEST_WEIGHT", "interval": "MINUTE", "intervalNum": 1, "limit": 6000} in body[
        "rateLimits"
    ]
    (symbol,) = body["symbols"]
    assert symbol["symbol"] == "BTCUSDT" and symbol["status"] == "TRADING"
    assert (symbol["baseAsset"], symbol["baseAssetPrecision"], symbol["quoteAsset"], symbol["quotePrecision"]) == (
        "BTC",
        8,
        "USDT",
        6,
    )
    filters = {f["filterType"]: f for f in symbol["filters"]}
    assert filters["PRICE_FILTER"]["tickSize"] == "0.010000"
    assert filters["LOT_SIZE"] == {
        "filterType": "LOT_SIZE",
        "minQty": "0.00010000",
        "maxQty": "1000.00000000",
        "stepSize": "0.00010000",
    }
    assert filters["NOTIONAL"]["minNotional"] == "1.000000"
    assert symbol["orderTypes"] == ["LIMIT", "MARKET", "LIMIT_MAKER"]
    assert symbol["isSpotTradingAllowed"] is True and symbol["permissionSets"] == [["SPOT"]]


def test_a_halted_market_is_halt(client, btc_usdt):
    market_halt(market_id=btc_usdt.id, operator_id=UserFactory().id, reason="test")
    assert get(client, "exchangeInfo", symbol="BTCUSDT").json()["symbols"][0]["status"] == "HALT"


def test_depth(client, traded, btc_usdt):
    body = get(client, "depth", symbol="BTCUSDT", limit=5).json()
    assert body["bids"] == [["58900.000000", "0.10000000"]]
    assert body["asks"] == [["61000.000000", "0.50000000"]]
    btc_usdt.refresh_from_db()
    assert body["lastUpdateId"] == btc_usdt.sequence


def test_a_depth_limit_above_5000_is_cut_to_5000_as_binance_does(client, traded):
    """Break-it review: limit=5001 was -1100; Binance: "If limit > 5000, then the response will truncate to 5000"."""
    whole = get(client, "depth", symbol="BTCUSDT", limit=5000).json()
    assert get(client, "depth", symbol="BTCUSDT", limit=5001).json() == whole
    assert get(client, "depth", symbol="BTCUSDT", limit=10**12).json() == whole
    assert get(client, "depth", symbol="BTCUSDT", limit=0).json()["code"] == -1100


def test_trades_oldest_first_with_integer_ids(client, traded):
    body = get(client, "trades", symbol="BTCUSDT").json()
    assert [(t["price"], t["qty"], t["isBuyerMaker"]) for t in body] == [
        ("59900.000000", "0.10000000", False),
        ("59000.000000", "0.20000000", True),
        ("58900.000000", "0.10000000", True),
    ]
    assert all(isinstance(t["id"], int) for t in body) and body == sorted(body, key=lambda t: t["id"])
    assert body[0]["quoteQty"] == "5990.000000"


def test_historical_trades_from_id(client, traded):
    ids = [t["id"] for t in get(client, "trades", symbol="BTCUSDT").json()]
    body = get(client, "historicalTrades", symbol="BTCUSDT", fromId=ids[1]).json()
    assert [t["id"] for t in body] == ids[1:]
    assert [t["id"] for t in get(client, "historicalTrades", symbol="BTCUSDT", limit=1).json()] == ids[-1:]


def test_agg_trades_sum_one_taker_order_per_price(client, traded):
    body = get(client, "aggTrades", symbol="BTCUSDT").json()
    assert [(a["p"], a["q"], a["m"]) for a in body] == [
        ("59900.000000", "0.10000000", False),
        ("59000.000000", "0.20000000", True),
        ("58900.000000", "0.10000000", True),
    ]
    assert all(a["f"] == a["l"] == a["a"] for a in body)
    assert get(client, "aggTrades", symbol="BTCUSDT", fromId=body[2]["a"]).json() == body[2:]


def test_agg_trades_windows_bound_the_times_they_show(client, traded):
    """A time shown as T (rounded to the millisecond) is inside [T, T] and outside the windows ending at T - 1 and
    starting at T + 1, whatever its microseconds."""
    for agg in get(client, "aggTrades", symbol="BTCUSDT").json():
        shown = agg["T"]

        def ids(start, end):
            body = get(client, "aggTrades", symbol="BTCUSDT", startTime=start, endTime=end).json()
            return [a["a"] for a in body]

        assert agg["a"] in ids(shown, shown)
        assert agg["a"] not in ids(shown - 60_000, shown - 1) + ids(shown + 1, shown + 60_000)
        assert agg["a"] in ids(shown - 3_600_000, shown)  # an hour exactly, as CCXT asks for it
    too_long = get(client, "aggTrades", symbol="BTCUSDT", startTime=0, endTime=3_600_001)
    assert (too_long.status_code, too_long.json()) == (
        400,
        {"code": -1127, "msg": "More than 1 hours between startTime and endTime."},  # Binance's words
    )


def test_avg_price_is_volume_weighted(client, traded):
    body = get(client, "avgPrice", symbol="BTCUSDT").json()
    # (5990 + 11800 + 5890) / 0.4 = 59200
    assert body["mins"] == 5 and body["price"] == "59200.000000"


def test_ticker_price_and_book_ticker(client, traded):
    assert get(client, "ticker/price", symbol="BTCUSDT").json() == {"symbol": "BTCUSDT", "price": "58900.000000"}
    assert get(client, "ticker/price").json() == [{"symbol": "BTCUSDT", "price": "58900.000000"}]
    assert get(client, "ticker/bookTicker", symbol="BTCUSDT").json() == {
        "symbol": "BTCUSDT",
        "bidPrice": "58900.000000",
        "bidQty": "0.10000000",
        "askPrice": "61000.000000",
        "askQty": "0.50000000",
    }


def test_ticker_24hr(client, traded):
    body = get(client, "ticker/24hr", symbol="BTCUSDT").json()
    assert (body["openPrice"], body["highPrice"], body["lowPrice"], body["lastPrice"]) == (
        "59900.000000",
        "59900.000000",
        "58900.000000",
        "58900.000000",
    )
    assert (body["priceChange"], body["priceChangePercent"]) == ("-1000.000000", "-1.670")
    assert (body["volume"], body["quoteVolume"], body["count"]) == ("0.40000000", "23680.000000", 3)
    assert body["weightedAvgPrice"] == "59200.000000" and body["lastQty"] == "0.10000000"
    trades = Trade.objects.order_by("taker_order_id", "seq")
    assert body["firstId"] < body["lastId"] and body["lastId"] == trades.last().taker_order_id * 10**6 + 2
    assert body["firstId"] == trades.first().number
    assert body["prevClosePrice"] == "0.000000"  # no trade before the 24 hours
    (listed,) = get(client, "ticker/24hr", symbols='["BTCUSDT"]').json()
    assert (listed["symbol"], listed["lastPrice"], listed["count"]) == ("BTCUSDT", "58900.000000", 3)
    mini = get(client, "ticker/24hr", symbol="BTCUSDT", type="MINI").json()
    assert "priceChange" not in mini and mini["lastPrice"] == "58900.000000"


def test_klines(client, traded):
    (kline,) = get(client, "klines", symbol="BTCUSDT", interval="1d").json()
    assert kline[1:6] == ["59900.000000", "59900.000000", "58900.000000", "58900.000000", "0.40000000"]
    assert kline[7:11] == ["23680.000000", 3, "0.10000000", "5990.000000"]
    assert kline[6] == kline[0] + 86_400_000 - 1
    assert get(client, "uiKlines", symbol="BTCUSDT", interval="1d").json() == [kline]


def test_klines_near_the_last_legal_time_and_over_a_reversed_range_are_empty(client, traded):
    for start in ("253402300799999", "253370764800000"):
        for interval in ("1m", "1d"):
            response = get(client, "klines", symbol="BTCUSDT", interval=interval, startTime=start, limit=1000)
            assert (response.status_code, response.json()) == (200, [])
    now = int(time.time() * 1000)
    reversed_range = get(client, "klines", symbol="BTCUSDT", interval="1m", startTime=now, endTime=now - 60_000)
    assert (reversed_range.status_code, reversed_range.json()) == (200, [])


def ms_at(text: str) -> int:
    """``2026-02-02T10:00`` (UTC) in milliseconds since the epoch."""
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def kline_row(open_time: str, close_time: str, o: str, h: str, low: str, c: str, qty: str, quote: str, n: int) -> list:
    """Binance's kline array up to the trade count, at BTC-USDT's precisions (prices and quote 6 places, base 8)."""
    prices = [f"{Decimal(p):.6f}" for p in (o, h, low, c)]
    return [ms_at(open_time), *prices, f"{Decimal(qty):.8f}", ms_at(close_time) - 1, f"{Decimal(quote):.6f}", n]


def test_klines_of_the_derived_intervals_sum_the_stored_candles(client, btc_usdt):
    """3m, 2h, 1w and 1M, which no candle row is stored for, read from 1m, 1h and 1d as Binance cuts them: UTC,
    weeks from Monday, months from the 1st (February's closes after 28 days, March's after 31)."""
    record_calendar(btc_usdt.id)

    def klines(interval: str, **params) -> list:
        response = get(client, "klines", symbol="BTCUSDT", interval=interval, **params)
        assert response.status_code == 200, response.json()
        return response.json()

    three = klines("3m", startTime=ms_at("2026-02-02T10:00"), limit=2)
    assert three == [
        [ms_at("2026-02-02T10:00"), "92.000000", "92.000000", "90.000000", "90.000000", "2.00000000",
         ms_at("2026-02-02T10:03") - 1, "182.000000", 2, "2.00000000", "182.000000", "0"],  # 10:00:05 and 10:02:30
        [ms_at("2026-02-02T10:03"), "90.000000", "90.000000", "90.000000", "90.000000", "0.00000000",
         ms_at("2026-02-02T10:06") - 1, "0.000000", 0, "0.00000000", "0.000000", "0"],  # no trade: flat
    ]  # fmt: skip
    two_hours = klines("2h", startTime=ms_at("2026-02-02T08:00"), limit=3)
    assert [row[:9] for row in two_hours] == [
        kline_row("2026-02-02T08:00", "2026-02-02T10:00", "110", "110", "110", "110", "0", "0", 0),
        kline_row("2026-02-02T10:00", "2026-02-02T12:00", "92", "95", "90", "95", "3", "277", 3),
        kline_row("2026-02-02T12:00", "2026-02-02T14:00", "97", "97", "97", "97", "0.5", "48.5", 1),
    ]
    weeks = klines("1w", startTime=ms_at("2026-01-01"), limit=3)
    assert [row[:9] for row in weeks] == [
        kline_row("2026-01-26", "2026-02-02", "100", "110", "100", "110", "3", "320", 2),
        kline_row("2026-02-02", "2026-02-09", "92", "97", "90", "97", "3.5", "325.5", 4),
        kline_row("2026-02-09", "2026-02-16", "97", "97", "97", "97", "0", "0", 0),
    ]
    assert weeks[0][9:] == ["1.00000000", "100.000000", "0"]  # the Sunday's 2 were sold by the taker
    months = klines("1M", startTime=ms_at("2025-06-01"), limit=3)  # from the first trade's month
    assert [row[:9] for row in months] == [
        kline_row("2026-01-01", "2026-02-01", "100", "100", "100", "100", "1", "100", 1),
        kline_row("2026-02-01", "2026-03-01", "110", "110", "90", "97", "5.5", "545.5", 5),
        kline_row("2026-03-01", "2026-04-01", "120", "120", "120", "120", "1", "120", 1),
    ]
    assert [row[6] - row[0] + 1 for row in months] == [31 * 86_400_000, 28 * 86_400_000, 31 * 86_400_000]
    assert get(client, "uiKlines", symbol="BTCUSDT", interval="1M", startTime=ms_at("2025-06-01"), limit=3).json() == (
        months
    )


def test_klines_of_a_derived_interval_have_every_bucket_within_start_end_and_limit(client, btc_usdt):
    """As the stored intervals': flat where nothing traded, from the first trade to the current bucket; ``startTime``
    the first bucket opening at or after it, ``endTime`` (inclusive) the last opening at or before it."""
    record_calendar(btc_usdt.id)

    def open_close(interval: str, **params) -> list[tuple[int, str]]:
        rows = get(client, "klines", symbol="BTCUSDT", interval=interval, **params).json()
        return [(row[0], row[4]) for row in rows]

    weeks = open_close("1w", startTime=ms_at("2026-02-02"), limit=10)
    mondays = ["02-02", "02-09", "02-16", "02-23", "03-02", "03-09", "03-16", "03-23", "03-30", "04-06"]
    assert weeks == [
        (ms_at(f"2026-{monday}"), close)
        for monday, close in zip(mondays, ["97.000000"] * 8 + ["120.000000"] * 2, strict=True)
    ]
    assert open_close("1w", startTime=ms_at("2026-01-28"), limit=1) == [(ms_at("2026-02-02"), "97.000000")]
    assert open_close("3m", startTime=ms_at("2026-02-02T10:01"), limit=1) == [(ms_at("2026-02-02T10:03"), "90.000000")]
    assert open_close("3m", endTime=ms_at("2026-02-02T12:00"), limit=3) == [
        (ms_at("2026-02-02T11:54"), "90.000000"),
        (ms_at("2026-02-02T11:57"), "95.000000"),
        (ms_at("2026-02-02T12:00"), "97.000000"),  # opens at endTime: in
    ]
    assert open_close("1M", endTime=ms_at("2026-02-15"), limit=5) == [
        (ms_at("2026-01-01"), "100.000000"),  # nothing before the first trade's month
        (ms_at("2026-02-01"), "97.000000"),
    ]
    now = timezone.now()
    this_month = datetime(now.year, now.month, 1, tzinfo=UTC)
    last_month = datetime(now.year - (now.month == 1), (now.month - 2) % 12 + 1, 1, tzinfo=UTC)
    latest = get(client, "klines", symbol="BTCUSDT", interval="1M", limit=2).json()
    assert [(row[0], row[4], row[8]) for row in latest] == [
        (int(last_month.timestamp() * 1000), "120.000000", 0),
        (int(this_month.timestamp() * 1000), "120.000000", 0),  # the current month, still open
    ]


@pytest.mark.parametrize(
    ("path", "params", "code"),
    [
        ("depth", {}, -1102),
        ("depth", {"symbol": "NOPEUSDT"}, -1121),
        ("depth", {"symbol": "btc-usdt"}, -1100),
        ("depth", {"symbol": "BTCUSDT", "limit": "0"}, -1100),
        ("depth", {"symbol": "BTCUSDT", "limit": "1e3"}, -1100),
        ("depth", {"symbol": "BTCUSDT", "limit": "99999999999999999999999"}, -1100),
        # More digits than int() reads (4300), and a digit it cannot read: the weight's int() was a 500 -1000.
        ("depth", {"symbol": "BTCUSDT", "limit": "9" * 4301}, -1100),
        ("depth", {"symbol": "BTCUSDT", "limit": "²"}, -1100),
        ("depth", {"symbol": "BTCUSDT", "colour": "red"}, -1104),
        ("klines", {"symbol": "BTCUSDT", "interval": "2m"}, -1120),
        ("klines", {"symbol": "BTCUSDT", "interval": "1s"}, -1120),  # Binance's, not served
        ("uiKlines", {"symbol": "BTCUSDT", "interval": "1mo"}, -1120),
        ("klines", {"symbol": "BTCUSDT"}, -1102),
        ("ticker/price", {"symbols": "BTCUSDT"}, -1100),
        ("ticker/price", {"symbols": '["NOPE"]'}, -1121),
        ("ticker", {"symbol": "BTCUSDT", "windowSize": "7d"}, -1130),
        ("trades", {"symbol": "BTCUSDT\x00"}, -1100),
        # Year 10000 and later: no datetime holds it (was a 500 -1000, "year out of range").
        ("klines", {"symbol": "BTCUSDT", "interval": "1m", "startTime": "253402300800000"}, -1100),
        ("uiKlines", {"symbol": "BTCUSDT", "interval": "1m", "endTime": "99999999999999999"}, -1100),
        ("aggTrades", {"symbol": "BTCUSDT", "startTime": "253402300800000"}, -1100),
    ],
)
def test_bad_input_is_a_binance_error(client, btc_usdt, path, params, code):
    response = get(client, path, **params)
    assert response.status_code == 400
    assert response.json()["code"] == code and response.json()["msg"]


def test_a_parameter_twice_is_refused(client, btc_usdt):
    response = client.get("/api/v3/depth?symbol=BTCUSDT&symbol=BTCUSDT")
    assert (response.status_code, response.json()["code"]) == (400, -1101)


def test_unknown_paths_and_methods_answer_in_binance_shape(client):
    response = client.get("/api/v3/nothing/here")
    assert response.status_code == 404 and response.json()["code"] == -1099
    response = client.post("/api/v3/ping")
    assert response.status_code == 405 and response.json()["code"] == -1099


def test_weight_header_counts_per_minute(client, btc_usdt):
    first = int(get(client, "depth", symbol="BTCUSDT").headers["X-MBX-USED-WEIGHT-1M"])
    second = int(get(client, "depth", symbol="BTCUSDT").headers["X-MBX-USED-WEIGHT-1M"])
    assert second - first == 5  # depth with limit <= 100 weighs 5


def test_a_malformed_request_counts_weight_too(client, btc_usdt):
    """Break-it review: 800 requests with a parameter given twice (-1101) counted no weight, so a client could send
    them without limit."""
    for _ in range(2):  # a second try only if the minute's window ended between the requests
        before = int(get(client, "ping").headers["X-MBX-USED-WEIGHT-1M"])
        malformed = client.get("/api/v3/depth?symbol=BTCUSDT&symbol=BTCUSDT&limit=5000")
        after = int(get(client, "ping").headers["X-MBX-USED-WEIGHT-1M"])
        if after > before:
            break
    assert (malformed.status_code, malformed.json()["code"]) == (400, -1101)
    assert malformed.headers["X-MBX-USED-WEIGHT-1M"] == str(before + 1)
    assert after == before + 2  # the malformed request's 1 and this ping's 1


def test_past_the_weight_limit_a_429_with_retry_after(client, btc_usdt, settings):
    for _ in range(2):  # a second try only if the minute's window ended between the requests
        used = int(get(client, "ping").headers["X-MBX-USED-WEIGHT-1M"])
        settings.BINANCE_REQUEST_WEIGHT_PER_MINUTE = used + 20
        at_limit = get(client, "exchangeInfo")  # weight 20: exactly at the limit
        response = get(client, "ping")
        if int(at_limit.headers["X-MBX-USED-WEIGHT-1M"]) == used + 20:
            break
    assert at_limit.status_code == 200
    assert response.status_code == 429 and response.json()["code"] == -1003
    assert response.headers["X-MBX-USED-WEIGHT-1M"] == str(used + 21)
    assert 1 <= int(response.headers["Retry-After"]) <= 60


def test_without_redis_requests_go_through_without_the_weight_header(client, btc_usdt, redis_unreachable):
    response = get(client, "depth", symbol="BTCUSDT")

    assert response.status_code == 200
    assert response.json()["bids"] == []
    assert "X-MBX-USED-WEIGHT-1M" not in response.headers


def test_binance_paths_we_do_not_serve_say_the_operation_is_unsupported(client):
    """A break-it review: CCXT's edit_order (POST order/cancelReplace) got -1099 "Not found", as if the API were
    wrong; exchangeInfo says cancelReplaceAllowed is false, and -1020 says so too."""
    from apps.binance.urls import UNSUPPORTED

    assert {"order/cancelReplace", "orderList/oco", "order/amendments", "ticker/tradingDay"} <= set(UNSUPPORTED)
    for name in UNSUPPORTED:
        for method in ("GET", "POST", "DELETE"):
            response = client.generic(method, f"/api/v3/{name}")
            assert (response.status_code, response.json()) == (
                400,
                {"code": -1020, "msg": "This operation is not supported."},
            ), (method, name)
