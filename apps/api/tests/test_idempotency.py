import threading
import uuid
from decimal import Decimal

import pytest
from django.db import connections

from apps.api.models import IdempotencyRecord
from apps.ledger.selectors import balances_for_user
from apps.ledger.tests.factories import UserFactory, fund

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

    assert [r.status_code for r in responses] == [201] * 8
    assert len({r.json()["entry_id"] for r in responses}) == 1
    assert available(alice) == Decimal("90")
    assert IdempotencyRecord.objects.filter(key="k-race").count() == 1
