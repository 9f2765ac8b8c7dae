from django.test import override_settings

from apps.ledger.tests.factories import UserFactory

PASSWORD = "correct horse battery staple"


@override_settings(AXES_FAILURE_LIMIT=3)
def test_repeated_failed_log_ins_lock_the_account_for_that_address(db, client):
    UserFactory(username="erin")
    statuses = [
        client.post("/accounts/login/", {"username": "erin", "password": "wrong"}).status_code for _ in range(3)
    ]

    locked = client.post("/accounts/login/", {"username": "erin", "password": PASSWORD})

    assert statuses == [200, 200, 429]
    assert locked.status_code == 429
    assert "Too many failed log-ins" in locked.content.decode()
    assert client.get("/wallet/").status_code == 302  # not logged in


@override_settings(AXES_FAILURE_LIMIT=3)
def test_api_token_log_ins_count_towards_the_lock(db, api):
    UserFactory(username="erin")
    for _ in range(3):
        api.post("/api/v1/auth/token/", {"username": "erin", "password": "x"}, format="json")

    locked = api.post("/api/v1/auth/token/", {"username": "erin", "password": PASSWORD}, format="json")

    assert locked.status_code == 429
    assert locked.json()["error"]["code"] == "rate_limited"


@override_settings(AXES_FAILURE_LIMIT=3)
def test_a_successful_log_in_resets_the_count(db, client):
    UserFactory(username="erin")
    for _ in range(2):
        client.post("/accounts/login/", {"username": "erin", "password": "wrong"})
    assert client.post("/accounts/login/", {"username": "erin", "password": PASSWORD}).status_code == 302
    client.post("/accounts/logout/")
    for _ in range(2):
        client.post("/accounts/login/", {"username": "erin", "password": "wrong"})
    assert client.post("/accounts/login/", {"username": "erin", "password": PASSWORD}).status_code == 302


@override_settings(AXES_FAILURE_LIMIT=3)
def test_an_api_lockout_under_a_url_prefix_is_json(db, api):
    """Mounted under SCRIPT_NAME, request.path starts with the prefix: the API's lockout is still in its shape."""
    UserFactory(username="erin")
    for _ in range(3):
        api.post("/api/v1/auth/token/", {"username": "erin", "password": "x"}, format="json", SCRIPT_NAME="/exchange")

    locked = api.post(
        "/api/v1/auth/token/", {"username": "erin", "password": PASSWORD}, format="json", SCRIPT_NAME="/exchange"
    )

    assert locked.status_code == 429
    assert locked.json()["error"]["code"] == "rate_limited"
