from decimal import Decimal

from apps.backoffice.models import Adjustment
from apps.ledger.models import EntryReason
from apps.ledger.services import funds_hold
from apps.ledger.tests.factories import AssetFactory, UserFactory, fund


def test_assets_are_public_with_amounts_as_plain_decimal_strings(db, api):
    AssetFactory(
        code="BTC", name="Bitcoin", decimals=8, withdrawal_fee=Decimal("0.0005"), min_withdrawal=Decimal("0.001")
    )

    response = api.get("/api/v1/assets/")

    assert response.status_code == 200
    assert response.json() == [
        {
            "code": "BTC",
            "name": "Bitcoin",
            "decimals": 8,
            "withdrawal_fee": "0.00050000",
            "min_withdrawal": "0.00100000",
        }
    ]


def test_balances_show_available_held_and_total_per_asset(db, usdt, btc, user, api_as):
    fund(user, usdt, "100")
    funds_hold(user_id=user.id, asset=usdt, amount=Decimal("30.5"), idempotency_key="order:1:hold")

    response = api_as(user, "read").get("/api/v1/balances/")

    assert response.json() == [
        {"asset": "BTC", "available": "0.00000000", "held": "0.00000000", "total": "0.00000000"},
        {"asset": "USDT", "available": "69.500000", "held": "30.500000", "total": "100.000000"},
    ]


def test_ledger_entries_show_only_the_users_own_postings(db, usdt, api_as):
    alice, bob = UserFactory(), UserFactory()
    fund(alice, usdt, "100")
    fund(bob, usdt, "7")
    funds_hold(
        user_id=alice.id,
        asset=usdt,
        amount=Decimal("30"),
        idempotency_key="order:9:hold",
        reason=EntryReason.ORDER_HOLD,
        reference_type="order",
        reference_id="9",
    )

    rows = api_as(alice, "read").get("/api/v1/ledger/entries/").json()
    funding = Adjustment.objects.get(memo=f"Test funding of {alice.username}")  # fund() records it

    assert [(r["account"], r["amount"], r["balance_after"], r["reason"], r["reference"]) for r in rows] == [
        ("held", "30.000000", "30.000000", "order_hold", "order:9"),
        ("available", "-30.000000", "70.000000", "order_hold", "order:9"),
        ("available", "100.000000", "100.000000", "adjustment", f"adjustment:{funding.id}"),
    ]
    assert rows[0]["time"].endswith("Z")
    bob_rows = api_as(bob, "read").get("/api/v1/ledger/entries/?asset=USDT").json()
    assert [r["amount"] for r in bob_rows] == ["7.000000"]


def test_ledger_entries_limit_must_be_in_range(db, user, api_as):
    response = api_as(user, "read").get("/api/v1/ledger/entries/?limit=0")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"limit": "Out of range."}


def test_a_list_filtered_by_an_unknown_market_or_asset_says_so(btc_usdt, user, api_as):
    """Not an empty list, which reads as "you have none" (from a break-it review)."""
    client = api_as(user, "read")
    for path, field in (
        ("/api/v1/orders/?market=NOPE-USDT", "market"),
        ("/api/v1/trades/?market=NOPE-USDT", "market"),
        ("/api/v1/ledger/entries/?asset=DOGE", "asset"),
    ):
        response = client.get(path)
        assert response.status_code == 404, path
        assert (response.json()["error"]["code"], list(response.json()["error"]["fields"])) == ("not_found", [field])
    for path in (
        "/api/v1/orders/?market=BTC-USDT",
        "/api/v1/trades/?market=BTC-USDT",
        "/api/v1/ledger/entries/?asset=BTC",
    ):
        assert client.get(path).status_code == 200, path
