"""The wallets API (API.md): deposit addresses, deposits, withdrawals and a key's withdrawal allow-list."""

import json
import threading
from decimal import Decimal

import pytest
from django.db import connections
from rest_framework.test import APIClient

from apps.accounts.services import api_key_create
from apps.accounts.tests.otp import fresh_code
from apps.api.models import IdempotencyRecord
from apps.audit.models import AuditLogEntry
from apps.ledger.services import user_accounts
from apps.ledger.tests.factories import AssetFactory, UserFactory
from apps.wallets.custody import simnet
from apps.wallets.models import DepositAddress, Withdrawal, WithdrawalStatus
from apps.wallets.services import withdrawal_request

from .factories import book_address, deposit_through_custody

WITHDRAWALS = "/api/v1/withdrawals/"
DESTINATION = simnet.new_address()


def balances(user, asset) -> tuple[Decimal, Decimal]:
    available, held = user_accounts(user.id, asset)
    return available.balance, held.balance


@pytest.fixture
def holder(usdt, btc):
    """A user who deposited 500 USDT through the simulated custody, with DESTINATION in their address book."""
    holder = UserFactory()
    deposit_through_custody(holder, usdt, "500")
    book_address(holder, usdt, DESTINATION)
    return holder


def withdraw(**overrides) -> dict:
    return {"asset": "USDT", "amount": "100", "address": DESTINATION, **overrides}


# Deposits ---------------------------------------------------------------------------------------------------


def test_deposit_address_is_handed_out_once_per_asset(usdt, btc, user, api_as):
    client = api_as(user, "read")

    first = client.get("/api/v1/deposit-address/BTC/")
    again = client.get("/api/v1/deposit-address/BTC/")

    assert first.status_code == 200
    assert first.json()["asset"] == "BTC"
    assert simnet.is_valid(first.json()["address"])
    assert again.json() == first.json()
    assert client.get("/api/v1/deposit-address/USDT/").json()["address"] != first.json()["address"]
    assert DepositAddress.objects.filter(user=user).count() == 2


def test_deposit_address_of_an_unknown_asset_is_404(usdt, user, api_as):
    response = api_as(user, "read").get("/api/v1/deposit-address/DOGE/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert not DepositAddress.objects.exists()


def test_deposits_list_only_the_users_own(usdt, btc, api_as):
    alice, bob = UserFactory(), UserFactory()
    first = deposit_through_custody(alice, btc, "0.1")
    second = deposit_through_custody(alice, usdt, "250.5")
    deposit_through_custody(bob, btc, "1")

    rows = api_as(alice, "read").get("/api/v1/deposits/").json()

    assert [{k: v for k, v in row.items() if k != "time"} for row in rows] == [
        {
            "id": second.id,
            "asset": "USDT",
            "amount": "250.500000",
            "txid": second.txid,
            "vout": 0,
            "status": "credited",
            "confirmations": second.confirmations,
        },
        {
            "id": first.id,
            "asset": "BTC",
            "amount": "0.10000000",
            "txid": first.txid,
            "vout": 0,
            "status": "credited",
            "confirmations": first.confirmations,
        },
    ]
    assert rows[0]["time"].endswith("Z")
    assert len(api_as(alice, "read").get("/api/v1/deposits/?limit=1").json()) == 1


# Withdrawals ------------------------------------------------------------------------------------------------


def test_request_list_and_cancel_a_withdrawal(holder, usdt, api_as):
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=Decimal(50), withdrawal_fee=Decimal(1))
    client = api_as(holder, "read", "withdraw")

    created = client.post(WITHDRAWALS, withdraw(), format="json")

    assert created.status_code == 201
    body = created.json()
    assert {k: v for k, v in body.items() if k not in ("id", "created_at", "updated_at")} == {
        "asset": "USDT",
        "amount": "100.000000",
        "fee": "1.000000",
        "address": DESTINATION,
        "status": "awaiting_approval",
        "txid": None,
        "reject_reason": None,
    }
    assert balances(holder, usdt) == (Decimal("399"), Decimal("101"))
    assert [row["id"] for row in client.get(WITHDRAWALS).json()] == [body["id"]]

    cancelled = client.delete(f"{WITHDRAWALS}{body['id']}/")

    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert balances(holder, usdt) == (Decimal("500"), Decimal("0"))
    again = client.delete(f"{WITHDRAWALS}{body['id']}/")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "invalid_state"


def test_a_withdraw_key_sends_nothing_out_once_the_second_factor_is_off_but_can_still_cancel(holder, usdt, api_as):
    """Regression: the second factor was checked only when the key was made, so a key kept withdrawing after the
    user (or a thief holding the session) turned it off."""
    from apps.accounts.enrolment import second_factor_remove

    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=Decimal(50))
    client = api_as(holder, "read", "withdraw")
    pending = client.post(WITHDRAWALS, withdraw(), format="json").json()

    second_factor_remove(user_id=holder.id, otp=fresh_code(holder))

    refused = client.post(WITHDRAWALS, withdraw(), format="json")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "second_factor_required"
    entry = {"asset": "USDT", "address": simnet.new_address(), "label": "cold"}
    assert client.post("/api/v1/withdrawal-addresses/", entry, format="json").status_code == 403
    assert Withdrawal.objects.count() == 1
    assert client.get(WITHDRAWALS).status_code == 200
    cancelled = client.delete(f"{WITHDRAWALS}{pending['id']}/")  # lowering the risk stays open
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"


def test_an_approved_withdrawal_can_no_longer_be_cancelled(holder, api_as):
    client = api_as(holder, "withdraw")
    created = client.post(WITHDRAWALS, withdraw(amount="10"), format="json").json()
    assert created["status"] == "approved"

    response = client.delete(f"{WITHDRAWALS}{created['id']}/")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_state"


def test_another_users_withdrawal_is_404_and_not_listed(holder, usdt, api_as):
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_auto_approve_limit=Decimal(50))
    withdrawal = withdrawal_request(user_id=holder.id, asset_code="USDT", amount="100", address=DESTINATION)
    intruder = api_as(UserFactory(), "read", "withdraw")

    response = intruder.delete(f"{WITHDRAWALS}{withdrawal.id}/")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert intruder.get(WITHDRAWALS).json() == []
    assert Withdrawal.objects.get(id=withdrawal.id).status == WithdrawalStatus.AWAITING_APPROVAL


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        (withdraw(amount="1000"), "insufficient_funds", None),
        (withdraw(amount="0.5"), "withdrawal_limit", "amount"),
        (withdraw(address="sim1" + "0" * 40), "invalid_address", "address"),
        (withdraw(address="bc1qxy2kgdygjrsqtzq2n0yrf2493p83kkfjhx0wlh"), "invalid_address", "address"),
    ],
)
def test_refused_withdrawals_answer_the_reason_and_hold_nothing(holder, usdt, api_as, body, code, field):
    response = api_as(holder, "withdraw").post(WITHDRAWALS, body, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert (field in response.json()["error"]["fields"]) if field else True
    assert not Withdrawal.objects.exists()
    assert balances(holder, usdt) == (Decimal("500"), Decimal("0"))


BAD_AMOUNTS = [
    pytest.param('"NaN"', id="NaN"),
    pytest.param('"sNaN"', id="sNaN"),
    pytest.param('"Infinity"', id="Infinity"),
    pytest.param('"1E+2"', id="exponent"),
    pytest.param("1e400", id="huge number"),
    pytest.param('"-5"', id="negative"),
    pytest.param("-5", id="negative number"),
    pytest.param('"0"', id="zero"),
    pytest.param('"1.0000001"', id="too many decimals"),
    pytest.param('""', id="empty"),
    pytest.param("true", id="boolean"),
    pytest.param("[100]", id="list"),
    pytest.param("null", id="null"),
]


def post_raw(client, body: dict, field: str, raw_json: str):
    """POST ``body`` with ``field`` set to the JSON text ``raw_json`` exactly as written."""
    text = json.dumps({**body, field: "__RAW__"}).replace('"__RAW__"', raw_json)
    return client.post(WITHDRAWALS, text, content_type="application/json")


@pytest.mark.parametrize(
    ("field", "raw", "code"),
    [
        *[pytest.param("amount", raw.values[0], "invalid_request", id=f"amount-{raw.id}") for raw in BAD_AMOUNTS],
        pytest.param("asset", '"DOGE"', "invalid_request", id="unknown asset"),
        pytest.param("asset", '""', "invalid_request", id="empty asset"),
        pytest.param("asset", "5", "invalid_request", id="asset number"),
        pytest.param("asset", '"USDT\\u0000"', "invalid_request", id="asset NUL"),
        pytest.param("address", '""', "invalid_request", id="empty address"),
        pytest.param("address", "12", "invalid_request", id="address number"),
        pytest.param("address", '"sim1\\u0000"', "invalid_request", id="address NUL"),
        pytest.param("address", f'" {DESTINATION}"', "invalid_address", id="address with a blank"),
    ],
)
def test_bad_input_is_400_naming_the_field_and_nothing_is_written(holder, usdt, api_as, field, raw, code):
    response = post_raw(api_as(holder, "withdraw"), withdraw(), field, raw)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert set(response.json()["error"]["fields"]) == {field}
    assert not Withdrawal.objects.exists()
    assert not IdempotencyRecord.objects.exists()
    assert balances(holder, usdt) == (Decimal("500"), Decimal("0"))


def test_amount_may_be_a_json_number(holder, api_as):
    response = api_as(holder, "withdraw").post(
        WITHDRAWALS,
        f'{{"asset": "USDT", "amount": 12.25, "address": "{DESTINATION}"}}',
        content_type="application/json",
    )
    assert response.status_code == 201
    assert response.json()["amount"] == "12.250000"


def test_idempotency_key_replays_and_refuses_another_body(holder, usdt, api_as):
    client = api_as(holder, "withdraw")
    first = client.post(WITHDRAWALS, withdraw(), format="json", HTTP_IDEMPOTENCY_KEY="w-1")
    again = client.post(WITHDRAWALS, withdraw(), format="json", HTTP_IDEMPOTENCY_KEY="w-1")
    other = client.post(WITHDRAWALS, withdraw(amount="101"), format="json", HTTP_IDEMPOTENCY_KEY="w-1")

    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_conflict"
    assert other.json()["error"]["fields"] == {"Idempotency-Key": "Used."}  # it was {} (break-it review)
    assert Withdrawal.objects.count() == 1
    assert balances(holder, usdt) == (Decimal("400"), Decimal("100"))


def test_a_sessions_retry_under_its_idempotency_key_replays_the_answer_not_the_used_up_code(holder, usdt, client):
    """Regression (break-it review): the code was checked before the key was looked up, so the retry of a
    session's withdrawal, same key, same body, same (now used) code, was refused ``invalid_otp``."""
    client.force_login(holder)  # Django's test client skips the CSRF check
    fresh_code(holder)  # a second factor, as every session withdrawal needs
    body = withdraw(amount="10", otp=fresh_code(holder))

    first = client.post(WITHDRAWALS, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="w-2")
    again = client.post(WITHDRAWALS, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="w-2")
    fresh = client.post(WITHDRAWALS, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="w-3")

    assert (first.status_code, again.status_code) == (201, 201) and again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert fresh.status_code == 400 and fresh.json()["error"]["code"] == "invalid_otp"  # a new key: checked again
    assert list(Withdrawal.objects.values_list("amount", flat=True)) == [Decimal(10)]


@pytest.mark.parametrize(
    "typo, code",
    [
        ({"amount": "-1"}, "invalid_request"),
        ({"amount": "0.0000001"}, "invalid_request"),
        ({"address": simnet.new_address()}, "address_not_allowed"),
        ({"amount": "0.000001"}, "withdrawal_limit"),
        ({"amount": "5000"}, "insufficient_funds"),  # 5000 for 50
    ],
)
def test_a_withdrawal_refused_for_a_typo_does_not_use_up_the_sessions_code(holder, usdt, client, typo, code):
    """Break-it review: a refused amount spent the one-time code, and the corrected request with the same code was
    refused ``invalid_otp`` ("already used"). The checks that need no lock now come before the code."""
    client.force_login(holder)
    fresh_code(holder)
    otp = fresh_code(holder)

    refused = client.post(WITHDRAWALS, withdraw(otp=otp, **typo), content_type="application/json")
    corrected = client.post(WITHDRAWALS, withdraw(amount="10", otp=otp), content_type="application/json")

    assert (refused.status_code, refused.json()["error"]["code"]) == (400, code)
    assert corrected.status_code == 201, corrected.json()
    assert list(Withdrawal.objects.values_list("amount", flat=True)) == [Decimal(10)]


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_request_one_withdrawal(holder, usdt, api_as):
    clients = [api_as(holder, "withdraw") for _ in range(6)]
    barrier = threading.Barrier(len(clients))
    responses = []

    def post(client):
        barrier.wait()
        try:
            responses.append(client.post(WITHDRAWALS, withdraw(), format="json", HTTP_IDEMPOTENCY_KEY="w-race"))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Each duplicate is answered as the first was (it came after) or refused as in use (it came during).
    requested = [response for response in responses if response.status_code == 201]
    in_use = [response for response in responses if response.status_code == 409]
    assert requested and len(requested) + len(in_use) == 6
    assert {response.json()["error"]["code"] for response in in_use} <= {"idempotency_key_in_use"}
    assert len({response.json()["id"] for response in requested}) == 1
    assert Withdrawal.objects.count() == 1
    assert balances(holder, usdt) == (Decimal("400"), Decimal("100"))


# A key's withdrawal allow-list (issue 8) ------------------------------------------------------------------------


def client_with_key(user, addresses):
    raw = api_key_create(
        user_id=user.id, name="bot", scopes=["withdraw"], withdrawal_addresses=addresses, otp=fresh_code(user)
    ).raw_key
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client


def test_a_key_with_an_allow_list_withdraws_only_to_those_addresses(holder, usdt):
    allowed, other = simnet.new_address(), simnet.new_address()
    book_address(holder, usdt, allowed)
    book_address(holder, usdt, other)
    client = client_with_key(holder, [allowed])

    refused = client.post(WITHDRAWALS, withdraw(address=other), format="json")

    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "permission_denied"
    assert set(refused.json()["error"]["fields"]) == {"address"}
    assert not Withdrawal.objects.exists()
    assert balances(holder, usdt) == (Decimal("500"), Decimal("0"))
    accepted = client.post(WITHDRAWALS, withdraw(address=allowed), format="json")
    assert accepted.status_code == 201


def test_keys_without_an_allow_list_and_the_browser_session_withdraw_anywhere_in_the_address_book(holder, client):
    assert client_with_key(holder, []).post(WITHDRAWALS, withdraw(amount="10"), format="json").status_code == 201
    client.force_login(holder)  # Django's test client skips the CSRF check
    body = withdraw(amount="10", otp=fresh_code(holder))  # the withdraw key's creation enrolled a second factor
    response = client.post(WITHDRAWALS, body, content_type="application/json")
    assert response.status_code == 201


def test_a_code_sent_with_a_withdraw_key_is_checked_not_ignored(holder, usdt):
    """A key's withdraw scope stands for the second factor, but a wrong code it sends is refused (from a break-it
    review: a wrong ``otp`` was ignored and the withdrawal approved)."""
    client = client_with_key(holder, [])
    assert client.post(WITHDRAWALS, withdraw(amount="10", otp=fresh_code(holder)), format="json").status_code == 201

    wrong = client.post(WITHDRAWALS, withdraw(amount="20", otp="000000"), format="json")

    assert wrong.status_code == 400
    assert (wrong.json()["error"]["code"], set(wrong.json()["error"]["fields"])) == ("invalid_otp", {"otp"})
    assert list(Withdrawal.objects.values_list("amount", flat=True)) == [Decimal(10)]
    assert balances(holder, usdt) == (Decimal("490"), Decimal("10"))


def test_a_huge_amount_of_an_18_decimal_asset_is_judged_not_a_server_error(user, api_as):
    """Quantized to 18 decimals it has more than the 28 digits of Decimal's default context."""
    eth = AssetFactory(
        code="ETH", name="Ether", decimals=18, min_withdrawal=Decimal("0.01"), withdrawal_daily_limit=Decimal(1000)
    )
    book_address(user, eth, DESTINATION)

    response = api_as(user, "withdraw").post(
        WITHDRAWALS, withdraw(asset="ETH", amount="12345678901.000000000000000001"), format="json"
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "insufficient_funds"  # the user holds no ETH (judged first)
    assert not Withdrawal.objects.exists()


def test_wrong_codes_lock_a_sessions_withdrawals_with_a_429_saying_when_to_retry(holder, client, settings):
    settings.OTP_TOTP_THROTTLE_FACTOR = settings.OTP_STATIC_THROTTLE_FACTOR = 60
    client.force_login(holder)
    right = fresh_code(holder)
    wrong = "000000" if right != "000000" else "111111"

    refused = client.post(WITHDRAWALS, withdraw(amount="10", otp=wrong), content_type="application/json")
    locked = client.post(WITHDRAWALS, withdraw(amount="10", otp=right), content_type="application/json")

    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_otp"
    assert locked.status_code == 429
    error = locked.json()["error"]
    assert error["code"] == "second_factor_locked" and "otp" in error["fields"]
    assert 0 < int(locked["Retry-After"]) <= 60
    assert not Withdrawal.objects.filter(user=holder).exists()
    failures = AuditLogEntry.objects.filter(actor=holder, action="second_factor.failed")
    assert sorted(entry.after["reason"] for entry in failures) == ["locked", "wrong_code"]
