from django.core.cache import cache

from exchange.health import heartbeat_key


def test_healthz_is_503_naming_the_worker_when_no_heartbeat_task_ran(client, db):
    cache.delete(heartbeat_key())
    response = client.get("/healthz")
    assert response.status_code == 503
    report = response.json()
    assert (report["database"], report["redis"], report["worker"]) == (
        "ok",
        "ok",
        "no task run yet (worker or beat down)",
    )


def test_healthz_answers_503_naming_redis_when_redis_does_not_answer(client, db, settings, tmp_path):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"unix://{tmp_path}/nothing-listens-here.sock",
        }
    }
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["database"] == "ok"
    assert response.json()["redis"].startswith("error: ")
    # Not asked again (break-it review: three Redis timeouts in a row with Redis hung), nor called ok.
    assert (response.json()["worker"], response.json()["journal"]) == ("not checked (redis down)",) * 2


def test_the_journal_is_not_called_ok_when_its_head_witness_cannot_be_read(db, settings, tmp_path):
    """Break-it review: with Redis away the witness read as "none recorded" and the journal as ok, unchecked."""
    from apps.ledger.seal.health import journal_health

    settings.LEDGER_SEAL_HEAD_WITNESS = True
    settings.REDIS_URL = f"unix://{tmp_path}/nothing-listens-here.sock"

    assert journal_health() == "head witness not readable (ConnectionError)"
