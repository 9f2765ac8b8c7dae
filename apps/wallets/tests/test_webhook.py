"""The custody webhook: authentication, validation, the inbox (API.md "Custody webhook")."""

import hmac
import json
import time
from decimal import Decimal

import pytest
from django.test import Client

from apps.ledger.models import JournalEntry
from apps.ledger.services import user_accounts
from apps.wallets.custody import signing
from apps.wallets.custody.base import CallbackUnauthenticated
from apps.wallets.custody.simnet import new_address
from apps.wallets.models import CustodyEvent, Deposit, EventState
from apps.wallets.services import custody_event_process, deposit_address_get_or_create

from .factories import deposit_payload, signed

URL = "/custody/callbacks/"


@pytest.fixture
def address(btc, user) -> str:
    return deposit_address_get_or_create(user_id=user.id, asset=btc).address


def send(client: Client, body: bytes, headers: dict):
    extra = {name: value for name, value in headers.items() if name != "Content-Type"}
    return client.post(URL, data=body, content_type="application/json", headers=extra)


def test_signed_callback_is_stored_and_its_processing_queued_on_commit(
    client, address, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as queued:
        response = send(client, *signed(deposit_payload(address, "0.5", txid="a1")))

    assert response.status_code == 200
    assert response.json() == {"event_id": "evt-a1-0-1-confirmed", "status": "stored"}
    event = CustodyEvent.objects.get()
    assert (event.type, event.status, event.asset.code, str(event.amount), event.txid, event.vout) == (
        "deposit",
        "confirmed",
        "BTC",
        "0.500000000000000000",
        "a1",
        0,
    )
    assert event.state == EventState.RECEIVED
    assert len(queued) == 1  # the processing task, sent once the event is committed


def test_the_same_callback_again_is_answered_200_and_stored_once(client, address, django_capture_on_commit_callbacks):
    payload = deposit_payload(address, "0.5", txid="a2")
    assert send(client, *signed(payload)).status_code == 200

    with django_capture_on_commit_callbacks() as queued:
        again = send(client, *signed(payload, timestamp=int(time.time()) + 5))

    assert again.status_code == 200
    assert again.json()["status"] == "duplicate"
    assert CustodyEvent.objects.count() == 1
    assert queued == []


def test_a_known_event_id_with_other_content_is_a_conflict(client, address):
    payload = deposit_payload(address, "0.5", txid="a3", event_id="e-1")
    assert send(client, *signed(payload)).status_code == 200

    response = send(client, *signed({**payload, "amount": "5"}))

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "idempotency_conflict"
    assert [str(event.amount) for event in CustodyEvent.objects.all()] == ["0.500000000000000000"]


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda body, headers: (body, {**headers, "X-Custody-Signature": "0" * 64}), id="bad-signature"),
        pytest.param(lambda body, headers: (body.replace(b'"0.5"', b'"5.0"'), headers), id="body-changed"),
        pytest.param(lambda body, headers: (body, {"Content-Type": "application/json"}), id="no-headers"),
        pytest.param(
            lambda body, headers: (body, {k: v for k, v in headers.items() if k != "X-Custody-Signature"}),
            id="no-signature",
        ),
        pytest.param(lambda body, headers: (body, {**headers, "X-Custody-Timestamp": "soon"}), id="bad-timestamp"),
        pytest.param(lambda body, headers: signed(json.loads(body), secret="another-secret"), id="wrong-secret"),
        pytest.param(lambda body, headers: signed(json.loads(body), timestamp=int(time.time()) - 301), id="stale"),
        pytest.param(lambda body, headers: signed(json.loads(body), timestamp=int(time.time()) + 301), id="future"),
    ],
)
def test_unauthenticated_callbacks_get_401_and_nothing_is_stored(client, address, tamper):
    body, headers = tamper(*signed(deposit_payload(address, "0.5", txid="a4")))

    response = send(client, body, headers)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert not CustodyEvent.objects.exists()


def test_the_signature_is_judged_by_hmac_compare_digest_alone(client, address, monkeypatch, settings):
    """Constant time: whether a signature is right is decided by ``hmac.compare_digest`` (an ``==`` would let the
    time it takes tell a forger how much of a guess is right). Made to answer "equal", it lets a wrong signature
    through; made to answer "different", it stops the right one; so no other comparison has a say."""
    body, headers = signed(deposit_payload(address, "0.5", txid="ct1"))
    wrong = {**headers, "X-Custody-Signature": "0" * 64}
    secret = settings.CUSTODY_WEBHOOK_SECRET
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append((a, b)) or real(a, b))
    signing.verify(secret=secret, headers=headers, body=body, max_skew=300)
    assert compared == [(headers["X-Custody-Signature"].encode(),) * 2]

    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: True)
    signing.verify(secret=secret, headers=wrong, body=body, max_skew=300)

    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: False)
    with pytest.raises(CallbackUnauthenticated):
        signing.verify(secret=secret, headers=headers, body=body, max_skew=300)
    assert send(client, body, headers).status_code == 401  # the webhook judges by the same comparison
    assert not CustodyEvent.objects.exists()


def test_a_replayed_callback_is_answered_200_and_credits_once(client, address, btc, user):
    """The very same signed request sent again within the allowed skew (a replay), after its deposit was
    credited, and the same output reported under another event id: 200 each time, one credit."""
    body, headers = signed(deposit_payload(address, "0.5", txid="replayed"))
    assert send(client, body, headers).status_code == 200
    custody_event_process(event_pk=CustodyEvent.objects.get().pk)

    for _ in range(2):
        again = send(client, body, headers)
        assert (again.status_code, again.json()["status"]) == (200, "duplicate")
    other = send(client, *signed(deposit_payload(address, "0.5", txid="replayed", event_id="another-event-id")))
    assert other.status_code == 200
    for event in CustodyEvent.objects.filter(state=EventState.RECEIVED):
        custody_event_process(event_pk=event.pk)

    assert CustodyEvent.objects.count() == 2
    assert Deposit.objects.get(txid="replayed").amount == Decimal("0.5")
    assert JournalEntry.objects.filter(idempotency_key__startswith="deposit:").count() == 1
    assert user_accounts(user.id, btc)[0].balance == Decimal("0.5")


def test_timestamp_within_the_allowed_skew_is_accepted(client, address, settings):
    assert settings.CUSTODY_WEBHOOK_MAX_SKEW == 300
    payload = deposit_payload(address, "0.5", txid="a5")

    response = send(client, *signed(payload, timestamp=int(time.time()) - 250))

    assert response.status_code == 200


@pytest.mark.parametrize(
    "change, field",
    [
        ({"asset": "DOGE"}, "asset"),
        ({"amount": "-1"}, "amount"),
        ({"amount": "0"}, "amount"),
        ({"amount": "0.000000001"}, "amount"),  # 9 decimals for BTC (8)
        ({"amount": "NaN"}, "amount"),
        ({"amount": "Infinity"}, "amount"),
        ({"amount": "1e-3"}, "amount"),
        ({"amount": 0.5}, "amount"),
        ({"amount": None}, "amount"),
        ({"event_id": None}, "event_id"),
        ({"event_id": ""}, "event_id"),
        ({"event_id": "x" * 201}, "event_id"),
        ({"type": "refund"}, "type"),
        ({"status": "completed"}, "status"),  # not a deposit status
        ({"txid": None}, "txid"),
        ({"txid": 7}, "txid"),
        ({"txid": "a:1"}, "txid"),
        ({"txid": "a b"}, "txid"),
        ({"txid": "internal-23"}, "txid"),  # the id of withdrawal 23's internal settlement (break-it review)
        ({"vout": -1}, "vout"),
        ({"vout": "0"}, "vout"),
        ({"vout": True}, "vout"),
        ({"vout": 2**31}, "vout"),
        ({"confirmations": -2}, "confirmations"),
        ({"address": None}, "address"),
        ({"address": "sim1" + "0" * 40}, "address"),  # bad checksum
        ({"address": "bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq"}, "address"),  # not simnet
    ],
)
def test_malformed_deposit_callbacks_get_400_naming_the_field_and_nothing_is_stored(client, address, change, field):
    payload = deposit_payload(address, "0.5", txid="a6")
    payload.update(change)
    payload = {key: value for key, value in payload.items() if value is not None}

    response = send(client, *signed(payload))

    assert response.status_code == 400
    error = response.json()["error"]
    assert field in error["fields"], error
    assert not CustodyEvent.objects.exists()


def test_a_signed_callback_refused_is_logged_with_its_event_id_and_reasons(client, address, caplog):
    """Break-it review: a signed deposit with more decimals than the asset's was refused, custody retried it for ever,
    and only Django's bare "Bad Request" line was logged: nothing told an operator which event or why."""
    payload = deposit_payload(address, "0.000000001", txid="a7", event_id="evt-\u202e-decimals")

    with caplog.at_level("WARNING", logger="apps.wallets.views"):
        response = send(client, *signed(payload))

    assert response.status_code == 400
    [record] = [r for r in caplog.records if r.name == "apps.wallets.views"]
    assert record.getMessage() == (
        "custody.callback_refused event_id='evt-\\u202e-decimals' code=invalid_request "
        f"message={response.json()['error']['message']} fields=" + json.dumps(response.json()["error"]["fields"])
    )
    assert "amount" in response.json()["error"]["fields"]


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'"text"', b"\xff\xfe", b"{}", b'{"event_id": "x"}', b"[" * 60000],
    ids=["text", "array", "string", "not-utf8", "empty-object", "missing-fields", "deeply-nested"],
)
def test_bodies_that_are_not_a_callback_get_400(client, btc, body):
    response = send(client, *_signed_raw(body))

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert not CustodyEvent.objects.exists()


def test_a_field_given_twice_is_refused_naming_it_and_nothing_is_stored(client, address):
    """Found by a break-it review: ``{"amount": "0.01", "amount": "100"}`` credited 100 (the last one won), where a
    proxy or a log reading the first would have shown 0.01; /api/v1 refuses the same with ``duplicate_field``."""
    body = json.dumps(deposit_payload(address, "0.01", txid="d2"))[:-1] + ', "amount": "100"}'

    response = send(client, *_signed_raw(body.encode()))

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "duplicate_field"
    assert response.json()["error"]["fields"] == {"amount": "Given more than once."}
    assert not CustodyEvent.objects.exists()


def _signed_raw(body: bytes) -> tuple[bytes, dict]:
    from django.conf import settings

    from apps.wallets.custody.signing import signed_headers

    return body, signed_headers(secret=settings.CUSTODY_WEBHOOK_SECRET, body=body)


def test_withdrawal_callback_for_an_unknown_withdrawal_gets_400(client, btc):
    payload = {
        "event_id": "w-1",
        "type": "withdrawal",
        "asset": "BTC",
        "amount": "0.1",
        "txid": "t",
        "status": "completed",
        "withdrawal_id": 999999,
    }

    response = send(client, *signed(payload))

    assert response.status_code == 400
    assert "withdrawal_id" in response.json()["error"]["fields"]
    assert not CustodyEvent.objects.exists()


def test_body_above_the_limit_gets_413_and_nothing_is_stored(client, address, settings):
    settings.CUSTODY_WEBHOOK_MAX_BODY = 1024
    payload = deposit_payload(address, "0.5", txid="a7")
    payload["padding"] = "x" * 2000

    response = send(client, *signed(payload))

    assert response.status_code == 413
    # The stable code of API.md for 413 (review: it was invalid_request, the code of a malformed body).
    assert response.json()["error"] == {
        "code": "payload_too_large",
        "message": "The body is larger than 1024 bytes.",
        "fields": {},
    }
    assert not CustodyEvent.objects.exists()


def test_only_post_is_allowed(client, db):
    assert client.get(URL).status_code == 405


def test_callback_for_an_address_that_is_not_ours_is_stored_and_rejected_when_processed(client, btc):
    """A well-formed report about an address we never handed out is kept for an operator, not credited."""
    from apps.wallets.services import custody_event_process

    assert send(client, *signed(deposit_payload(new_address(), "0.5", txid="a8"))).status_code == 200

    event = custody_event_process(event_pk=CustodyEvent.objects.get().pk)

    assert event.state == EventState.REJECTED
    assert "not one of our deposit addresses" in event.error


@pytest.mark.django_db(transaction=True)
def test_a_callback_while_the_database_is_unreachable_is_a_503_to_send_again(client, address, database_connection_lost):
    from django.db import connection

    response = send(client, *signed(deposit_payload(address, "0.5", txid="down")))

    assert (response.status_code, response.headers["Retry-After"]) == (503, "1")
    assert response.json()["error"]["code"] == "unavailable"
    connection.close()
    assert send(client, *signed(deposit_payload(address, "0.5", txid="down"))).status_code == 200  # sent again
    assert CustodyEvent.objects.filter(txid="down").count() == 1
