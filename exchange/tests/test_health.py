def test_healthz_is_503_naming_the_worker_and_the_relay_when_neither_runs(client, db):
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {
        "database": "ok",
        "redis": "ok",
        "worker": "no worker",
        "journal": "ok",
        "relay": "no relay",
    }


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
