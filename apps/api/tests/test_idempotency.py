import threading
import uuid
from decimal import Decimal

import pytest
from django.db import connections, transaction

from apps.api.models import IdempotencyRecord
from apps.ledger.models import Account
from apps.ledger.selectors import balances_for_user
from apps.ledger.tests.factories import UserFactory, fund
from apps.wallets.tests.conftest import backend_pids, wait_for

pytestmark = pytest.mark.urls("apps.api.tests.urls_for_tests")


def available(user):
    return next(b.available for b in balances_for_user(user.id) if b.asset == "USDT")


@pytest.fixture
def alice_and_bob(db, usdt):
    alice, bob = UserFactory(), UserFactory()
    fund(alice, usdt, "100")
    return alice, bob


def test_same_key_and_body_returns_the_original_response_and_moves_money_once(alice_and_bob, api_as):
    alice, bob = alice_and_bob
    client = api_as(alice, "trade")
    body = {"to": bob.id, "amount": "10", "id": "t1"}

    first = client.post("/test/transfer/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    second = client.post("/test/transfer/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")

    assert first.status_code == second.status_code == 201
    assert second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    assert available(alice) == Decimal("90")


def test_same_key_with_a_different_body_is_409(alice_and_bob, api_as):
    alice, bob = alice_and_bob
    client = api_as(alice, "trade")
    client.post(
        "/test/transfer/", {"to": bob.id, "amount": "10", "id": "t1"}, format="json", HTTP_IDEMPOTENCY_KEY="k-2"
    )

    response = client.post(
        "/test/transfer/", {"to": bob.id, "amount": "11", "id": "t2"}, format="json", HTTP_IDEMPOTENCY_KEY="k-2"
    )

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "idempotency_conflict"
    assert response.json()["error"]["fields"] == {"Idempotency-Key": "Used."}  # as orders name it (break-it review)
    assert available(alice) == Decimal("90")


def test_a_failed_request_stores_nothing_and_can_be_retried_with_the_same_key(alice_and_bob, api_as, usdt):
    alice, bob = alice_and_bob
    client = api_as(alice, "trade")
    body = {"to": bob.id, "amount": "150", "id": "t3"}

    refused = client.post("/test/transfer/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-3")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "insufficient_funds"
    assert not IdempotencyRecord.objects.filter(key="k-3").exists()

    fund(alice, usdt, "100")
    accepted = client.post("/test/transfer/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-3")
    assert accepted.status_code == 201


def test_keys_are_per_user(alice_and_bob, api_as, usdt):
    alice, bob = alice_and_bob
    fund(bob, usdt, "100")
    alice_client, bob_client = api_as(alice, "trade"), api_as(bob, "trade")

    alice_client.post(
        "/test/transfer/", {"to": bob.id, "amount": "1", "id": "a"}, format="json", HTTP_IDEMPOTENCY_KEY="same"
    )
    response = bob_client.post(
        "/test/transfer/", {"to": alice.id, "amount": "1", "id": "b"}, format="json", HTTP_IDEMPOTENCY_KEY="same"
    )

    assert response.status_code == 201
    assert available(alice) == available(bob) == Decimal("100")


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_create_one_effect(usdt, api_as):
    alice, bob = UserFactory(), UserFactory()
    fund(alice, usdt, "100")
    body = {"to": bob.id, "amount": "10", "id": str(uuid.uuid4())}
    clients = [api_as(alice, "trade") for _ in range(8)]
    barrier = threading.Barrier(len(clients))
    responses = []

    def post(client):
        barrier.wait()
        responses.append(client.post("/test/transfer/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-race"))
        connections.close_all()

    threads = [threading.Thread(target=post, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Each duplicate is answered as the first was (it came after) or refused as in use (it came during).
    answered = [r for r in responses if r.status_code == 201]
    in_use = [r for r in responses if r.status_code == 409]
    assert len(answered) + len(in_use) == 8 and answered
    assert len({r.json()["entry_id"] for r in answered}) == 1
    assert {r.json()["error"]["code"] for r in in_use} <= {"idempotency_key_in_use"}
    assert available(alice) == Decimal("90")
    assert IdempotencyRecord.objects.filter(key="k-race").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_while_the_first_is_processed_is_refused_at_once_not_queued(usdt, api_as):
    """The first request is held inside its effect (alice's account locked elsewhere): a duplicate used to queue
    behind it on the key's unique index, holding a connection for as long (break-it review: with the matching
    engine down, 10 s each, one after the other, until PostgreSQL had no connection left)."""
    alice, bob = UserFactory(), UserFactory()
    fund(alice, usdt, "100")
    body = {"to": bob.id, "amount": "10", "id": "held"}
    locked, release = threading.Event(), threading.Event()
    responses: dict[str, object] = {}

    def hold_alices_account():
        with transaction.atomic():
            list(Account.objects.select_for_update().filter(owner_id=alice.id))
            locked.set()
            release.wait(timeout=60)
        connections.close_all()

    def post(name):
        responses[name] = api_as(alice, "trade").post(
            "/test/transfer/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-held"
        )
        connections.close_all()

    holder = threading.Thread(target=hold_alices_account)
    holder.start()
    assert locked.wait(timeout=30)
    first = threading.Thread(target=post, args=("first",))
    first.start()
    try:
        wait_for(
            lambda: backend_pids("wait_event_type = 'Lock' AND query LIKE %s", ["%ledger_transfer_post%"]),
            message="the first request waiting for alice's account",
        )
        duplicate = threading.Thread(target=post, args=("duplicate",))
        duplicate.start()
        duplicate.join(timeout=30)
        assert not duplicate.is_alive(), "the duplicate queued behind the first request"
    finally:
        release.set()
        holder.join()
        first.join()

    assert responses["duplicate"].status_code == 409
    assert responses["duplicate"].json()["error"]["code"] == "idempotency_key_in_use"
    assert responses["duplicate"].json()["error"]["fields"] == {"Idempotency-Key": "In use."}
    assert responses["first"].status_code == 201
    retried = api_as(alice, "trade").post("/test/transfer/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-held")
    assert retried.status_code == 201 and retried.headers["Idempotent-Replayed"] == "true"
    assert retried.json() == responses["first"].json()
    assert available(alice) == Decimal("90")
