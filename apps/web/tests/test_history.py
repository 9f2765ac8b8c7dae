"""The activity page (cursor pages, filters) and the CSV exports of activity, orders, fills, deposits, withdrawals."""

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.ledger.models import EntryReason
from apps.ledger.services import funds_hold
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.tests.helpers import place
from apps.wallets.custody import simnet
from apps.wallets.services import withdrawal_request
from apps.wallets.tests.factories import book_address, deposit_through_custody
from apps.web import views

DESTINATION = simnet.new_address()


def rows(response) -> list[list[str]]:
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


@pytest.fixture
def trader(db, usdt, btc):
    trader = UserFactory()
    fund(trader, usdt, "1000")
    fund(trader, btc, "1")
    return trader


def test_the_activity_page_pages_through_everything_with_a_cursor(trader, usdt, client, monkeypatch):
    monkeypatch.setattr(views, "ACTIVITY_PAGE", 2)
    for n in range(3):
        funds_hold(user_id=trader.id, asset=usdt, amount=Decimal(n + 1), idempotency_key=f"order:{n}:hold")
    client.force_login(trader)
    seen = []
    url = "/activity/?asset=USDT"
    while url:
        response = client.get(url)
        assert response.status_code == 200
        seen += [p.id for p in response.context["postings"]]
        query = response.context.get("next_query")
        url = f"/activity/?{query}" if query else None
    # 1 funding posting + 3 holds x 2 postings (available and held), each exactly once, newest first.
    assert len(seen) == 7 and len(set(seen)) == 7 and seen == sorted(seen, reverse=True)


def test_the_activity_page_filters_by_asset_type_and_dates(trader, usdt, client):
    funds_hold(
        user_id=trader.id, asset=usdt, amount=Decimal(5), idempotency_key="order:9:hold", reason=EntryReason.ORDER_HOLD
    )
    client.force_login(trader)

    holds = client.get("/activity/", {"type": EntryReason.ORDER_HOLD}).context["postings"]
    btc_only = client.get("/activity/", {"asset": "BTC"}).context["postings"]
    today = timezone.now().date()
    tomorrow = client.get("/activity/", {"start": str(today + timedelta(days=1))}).context["postings"]
    until_today = client.get("/activity/", {"end": str(today)}).context["postings"]

    assert {p.entry.reason for p in holds} == {EntryReason.ORDER_HOLD} and len(holds) == 2
    assert {p.asset.code for p in btc_only} == {"BTC"}
    assert list(tomorrow) == []
    assert len(until_today) == 4  # two fundings, the hold's two postings


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"asset": "DOGE"}, "asset"),
        ({"start": "yesterday"}, "start"),
        ({"cursor": "0"}, "cursor"),
        ({"start": "2026-02-02", "end": "2026-02-01"}, "end"),
        ({"type": "gift"}, "type"),
        ({"end": "9999-12-31"}, "end"),  # no datetime holds the midnight after it (was a 500, OverflowError)
    ],
)
def test_invalid_activity_filters_are_a_400_naming_the_field(trader, client, query, field):
    client.force_login(trader)
    response = client.get("/activity/", query)
    assert response.status_code == 400 and field in response.context["form"].errors
    export = client.get("/activity/export/", query)
    assert export.status_code == 400 and field in export.json()["error"]["fields"]


def test_the_activity_export_holds_every_posting_with_exact_amounts(trader, usdt, client):
    funds_hold(user_id=trader.id, asset=usdt, amount=Decimal("0.000001"), idempotency_key="order:1:hold")
    client.force_login(trader)

    exported = rows(client.get("/activity/export/", {"asset": "USDT"}))

    assert exported[0] == ["time", "entry_id", "asset", "account", "change", "balance_after", "reason", "reference"]
    changes = [(row[3], row[4], row[5]) for row in exported[1:]]
    assert changes == [
        ("on hold", "0.000001", "0.000001"),
        ("available", "-0.000001", "999.999999"),
        ("available", "1000.000000", "1000.000000"),
    ]


def test_orders_and_fills_export_with_average_price_and_exact_fees(btc_usdt, trader, client):
    other = UserFactory()
    fund(other, btc_usdt.base, "1")
    place(other, side="sell", price="50000", qty="0.01", client_order_id="=HYPERLINK(1)")
    order = place(trader, side="buy", type="market", qty="0.01")
    client.force_login(other)

    orders = rows(client.get("/orders/export/"))
    fills = rows(client.get("/fills/export/"))

    header = orders[0]
    (sold,) = [dict(zip(header, row, strict=True)) for row in orders[1:]]
    assert (sold["price"], sold["filled_qty"], sold["average_price"], sold["status"]) == (
        "50000.000000",
        "0.01000000",
        "50000",
        "filled",
    )
    assert sold["client_order_id"] == "'=HYPERLINK(1)"  # never run as a formula
    (fill,) = [dict(zip(fills[0], row, strict=True)) for row in fills[1:]]
    assert (fill["order_id"], fill["side"], fill["qty"], fill["fee"], fill["fee_asset"], fill["role"]) == (
        str(sold["id"]),
        "sell",
        "0.01",
        "0.5",
        "USDT",
        "maker",
    )
    assert order.status == "filled"


def test_deposits_and_withdrawals_export_by_date_range(db, usdt, btc, client):
    holder = UserFactory()
    deposit = deposit_through_custody(holder, usdt, "500")
    book_address(holder, usdt, DESTINATION)
    withdrawal = withdrawal_request(user_id=holder.id, asset_code="USDT", amount="50", address=DESTINATION)
    client.force_login(holder)
    today = str(timezone.now().date())

    deposits = rows(client.get("/wallet/deposits/export/", {"start": today, "end": today}))
    withdrawals = rows(client.get("/wallet/withdrawals/export/", {"start": today}))
    none_later = rows(client.get("/wallet/withdrawals/export/", {"start": "2999-01-01"}))

    assert [row[1:4] for row in deposits[1:]] == [[str(deposit.id), "USDT", "500.000000"]]
    assert [row[1:5] for row in withdrawals[1:]] == [[str(withdrawal.id), "USDT", "50.000000", "1.000000"]]
    assert none_later == [withdrawals[0]]


EXPORTS = [
    "/activity/export/",
    "/orders/export/",
    "/fills/export/",
    "/wallet/deposits/export/",
    "/wallet/withdrawals/export/",
]


@pytest.mark.parametrize("path", ["/activity/", *EXPORTS])
def test_an_end_date_whose_next_day_no_datetime_holds_is_refused_naming_end(trader, client, path):
    """A range is read up to the midnight after its last day: 9999-12-31 has none (``OverflowError``, a 500 on the
    page and every export, review); the last end date is 9999-12-30."""
    client.force_login(trader)

    response = client.get(path, {"end": "9999-12-31"})
    last = client.get(path, {"start": "9999-12-30", "end": "9999-12-30"})

    assert response.status_code == 400
    errors = response.context["form"].errors if path == "/activity/" else response.json()["error"]["fields"]
    assert list(errors) == ["end"]
    assert "Must be on or before 9999-12-30." in str(errors["end"])
    assert last.status_code == 200


@pytest.mark.parametrize("path", ["/activity/", *EXPORTS])
@pytest.mark.parametrize("start", ["0001-01-01", "9999-12-31"])
def test_a_start_date_at_either_end_of_the_calendar_is_read(trader, client, path, start):
    client.force_login(trader)

    response = client.get(path, {"start": start})

    assert response.status_code == 200
    if path != "/activity/":
        fundings = 2 if start == "0001-01-01" and path == "/activity/export/" else 0  # the trader's USDT and BTC
        assert len(rows(response)) == 1 + fundings  # the header, and every row from that day on
