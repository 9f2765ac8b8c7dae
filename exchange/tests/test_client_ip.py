"""Who the client is (hole 3): X-Forwarded-For is believed only as far as TRUSTED_PROXY_COUNT says."""

import pytest
from django.core.cache import cache
from django.test import RequestFactory, override_settings

from apps.ledger.tests.factories import UserFactory
from exchange.client_ip import client_ip


def request_from(remote: str, forwarded: str | None = None):
    headers = {"x-forwarded-for": forwarded} if forwarded is not None else {}
    return RequestFactory().get("/", REMOTE_ADDR=remote, headers=headers)


@pytest.mark.parametrize(
    ("proxies", "forwarded", "expected"),
    [
        (0, None, "10.0.0.1"),
        (0, "198.51.100.9", "10.0.0.1"),  # no proxy configured: the header is the client's own words
        (1, None, "10.0.0.1"),
        (1, "198.51.100.9", "198.51.100.9"),
        (1, "6.6.6.6, 198.51.100.9", "198.51.100.9"),  # a forged entry sits left of what our proxy appended
        (2, "6.6.6.6, 198.51.100.9, 10.1.1.1", "198.51.100.9"),
        (2, "198.51.100.9", "198.51.100.9"),  # fewer entries than proxies: the leftmost
        (1, "not-an-ip", "10.0.0.1"),
        (1, " , ", "10.0.0.1"),
        (1, "2001:db8::1", "2001:db8::1"),
    ],
)
def test_the_client_ip_is_the_nth_forwarded_address_from_the_right(settings, proxies, forwarded, expected):
    settings.TRUSTED_PROXY_COUNT = proxies
    assert client_ip(request_from("10.0.0.1", forwarded)) == expected


def _login_statuses(api, forwarded_values, *, remote="203.0.113.50"):
    return [
        api.post(
            "/api/v1/auth/token/",
            {"username": "x", "password": "y"},
            format="json",
            REMOTE_ADDR=remote,
            HTTP_X_FORWARDED_FOR=value,
        ).status_code
        for value in forwarded_values
    ]


def _forget_counters(*addresses: str) -> None:
    """Delete the rate counters of ``addresses`` (:mod:`apps.api.throttles`' keys, ``throttle:<scope>:<ident>``):
    DRF's key format, deleted here before, named no counter, and a run within a minute of another found its counts."""
    cache.delete_many([f"throttle:{scope}:{address}" for scope in ("login", "ip") for address in addresses])


def _login_rate(settings, rate: str) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "login": rate},
    }


def test_a_random_forwarded_for_per_request_does_not_escape_the_login_throttle(db, api, settings):
    """Without trusted proxies, a client that sends a new X-Forwarded-For every time is still one client."""
    _login_rate(settings, "3/min")
    _forget_counters("203.0.113.50", *(f"198.51.100.{n}" for n in range(1, 6)))

    statuses = _login_statuses(api, [f"198.51.100.{n}" for n in range(1, 6)])

    assert statuses == [401, 401, 401, 429, 429]


def test_behind_one_proxy_the_login_throttle_counts_the_forwarded_client(db, api, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    _login_rate(settings, "2/min")
    _forget_counters("203.0.113.50", "198.51.100.7", "198.51.100.8")

    # the same client behind the proxy, each time with a different forged left part: one counter
    forged = _login_statuses(api, [f"6.6.6.{n}, 198.51.100.7" for n in range(3)])
    # another client through the same proxy has a counter of its own
    other = _login_statuses(api, ["198.51.100.8"])

    assert forged == [401, 401, 429]
    assert other == [401]


@override_settings(AXES_FAILURE_LIMIT=3)
def test_log_in_lockouts_ignore_a_forged_forwarded_for(db, client):
    UserFactory(username="erin")
    statuses = [
        client.post(
            "/accounts/login/", {"username": "erin", "password": "wrong"}, HTTP_X_FORWARDED_FOR=f"198.51.100.{n}"
        ).status_code
        for n in range(4)
    ]
    assert statuses == [200, 200, 429, 429]


@override_settings(AXES_FAILURE_LIMIT=2, TRUSTED_PROXY_COUNT=1)
def test_behind_a_proxy_log_in_lockouts_are_per_forwarded_client(db, client):
    UserFactory(username="erin")
    locked = [
        client.post(
            "/accounts/login/", {"username": "erin", "password": "wrong"}, HTTP_X_FORWARDED_FOR="198.51.100.7"
        ).status_code
        for _ in range(3)
    ]
    # the proxy's address (REMOTE_ADDR) is shared by everyone: another client is not locked out
    other = client.post(
        "/accounts/login/", {"username": "erin", "password": "wrong"}, HTTP_X_FORWARDED_FOR="198.51.100.8"
    )
    assert locked == [200, 429, 429]
    assert other.status_code == 200


def test_a_websockets_client_is_decided_by_the_same_rule(settings):
    from exchange.client_ip import scope_client_ip

    settings.TRUSTED_PROXY_COUNT = 2
    scope = {
        "client": ("10.0.0.2", 50000),
        "headers": [(b"x-forwarded-for", b"6.6.6.6, 203.0.113.9"), (b"host", b"x"), (b"x-forwarded-for", b"10.0.0.1")],
    }
    assert scope_client_ip(scope) == "203.0.113.9"  # two headers are one list; the 2nd address from the right
    settings.TRUSTED_PROXY_COUNT = 0
    assert scope_client_ip(scope) == "10.0.0.2"
    assert scope_client_ip({"headers": []}) == ""  # no peer (a test scope): nothing to allow
