"""``/healthz`` with a real worker and relay (the worker fixtures live with the wallets' tests)."""

import pytest

from apps.streams.tests.processes import start_relay

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def relay(tmp_path):
    relay = start_relay(tmp_path)
    yield relay
    relay.stop()


def test_healthz_is_200_when_database_redis_a_worker_and_the_relay_answer(client, worker, relay):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"database": "ok", "redis": "ok", "worker": "ok", "journal": "ok", "relay": "ok"}


def test_healthz_is_503_once_the_worker_stops(client, worker, relay):
    worker.stop()
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["worker"] == "no worker"


def test_healthz_is_503_once_the_relay_stops(client, worker, relay):
    relay.stop()
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["relay"] == "no relay"
