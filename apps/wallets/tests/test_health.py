"""``/healthz`` with a real worker and the session's relay (the worker fixtures live with the wallets' tests)."""

import re
import time

import pytest
from django.core.cache import cache

from exchange.celery import heartbeat
from exchange.health import heartbeat_key

from .conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_healthz_is_200_once_a_worker_ran_a_heartbeat_and_503_when_none_ran_lately(
    client, worker, stream_servers, settings
):
    cache.delete(heartbeat_key())
    assert client.get("/healthz").json()["worker"] == "no task run yet (worker or beat down)"

    heartbeat.delay()  # as beat sends it every HEALTH_HEARTBEAT_SECONDS
    wait_for(lambda: client.get("/healthz").status_code == 200, message="/healthz 200")
    assert client.get("/healthz").json() == {
        "database": "ok",
        "redis": "ok",
        "worker": "ok",
        "journal": "ok",
        "relay": "ok",
    }

    worker.stop()  # break-it review: a worker whose pool ran nothing still answered the control broadcast
    settings.HEALTH_HEARTBEAT_MAX_AGE = 1
    time.sleep(1.5)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert re.fullmatch(r"no task run for \d+ s \(worker or beat down\)", response.json()["worker"])
