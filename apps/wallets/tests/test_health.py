"""``/healthz`` with a real worker (the worker fixtures live with the wallets' tests)."""

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_healthz_is_200_when_database_redis_and_a_worker_answer(client, worker):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"database": "ok", "redis": "ok", "worker": "ok"}


def test_healthz_is_503_once_the_worker_stops(client, worker):
    worker.stop()
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["worker"] == "no worker"
