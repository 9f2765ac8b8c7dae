"""Every /api/v3/ route, every method, every parameter it reads, given hostile values: a Binance error, never a 500."""

from urllib.parse import urlencode

import pytest
from django.urls import URLPattern

from apps.binance.urls import urlpatterns

pytestmark = pytest.mark.django_db

HOSTILE = [
    "",
    " ",
    "-1",
    "0",
    "1e9",
    "NaN",
    "Infinity",
    "9" * 40,
    "\x00",
    "é",
    "[",
    '["BTCUSDT"',
    "BTC-USDT",
    "x" * 500,
]


def _routes():
    for pattern in urlpatterns:
        if isinstance(pattern, URLPattern) and hasattr(pattern.callback, "endpoints"):
            for method, found in pattern.callback.endpoints.items():
                yield str(pattern.pattern), method, found


ROUTES = list(_routes())


def test_every_route_is_covered():
    assert len(ROUTES) == 27


@pytest.mark.parametrize(("path", "method", "found"), ROUTES, ids=[f"{m} {p}" for p, m, _ in ROUTES])
def test_hostile_parameters_get_a_binance_error(client, btc_usdt, path, method, found):
    for name in found.params or ("anything",):
        for value in HOSTILE:
            query = {"symbol": "BTCUSDT", name: value} if name != "symbol" else {name: value}
            url = f"/api/v3/{path}"
            if method == "POST":
                response = client.post(url, urlencode(query), content_type="application/x-www-form-urlencoded")
            else:
                response = client.generic(method, f"{url}?{urlencode(query)}")
            assert response.status_code < 500, (method, path, name, value, response.content)
            body = response.json()
            assert response.status_code == 200 or isinstance(body["code"], int), body
