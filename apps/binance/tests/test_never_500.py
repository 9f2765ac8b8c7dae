"""Every /api/v3/ route, every method, every parameter it reads, given hostile values: a Binance error, never a 500."""

import hashlib
import hmac
import time
from urllib.parse import urlencode

import pytest
from django.urls import URLPattern

from apps.binance.endpoint import Security
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
    "9" * 4301,  # more digits than int() reads
    "²",  # a digit by str.isdigit() that int() cannot read
    "253402300799999",  # the last millisecond of year 9999
    "253402300800000",  # year 10000: no datetime holds it
    "99999999999999999",
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
def test_hostile_parameters_get_a_binance_error(client, btc_usdt, path, method, found, signing_key):
    """Signed endpoints are called with a valid key and signature, so that their own parameters are judged."""
    from apps.ledger.tests.factories import UserFactory

    raw_key, secret = signing_key(UserFactory(), "read", "trade")
    signed = found.security in (Security.USER_DATA, Security.TRADE)
    for name in [n for n in found.params if n not in ("timestamp", "signature")] or ["anything"]:
        for value in HOSTILE:
            query = {"symbol": "BTCUSDT", name: value} if name != "symbol" else {name: value}
            text = urlencode(query)
            if signed:
                text += f"&timestamp={int(time.time() * 1000)}"
                text += "&signature=" + hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()
            url = f"/api/v3/{path}"
            headers = {"HTTP_X_MBX_APIKEY": raw_key} if found.security is not Security.NONE else {}
            if method in ("POST", "PUT"):
                response = client.generic(method, url, text, "application/x-www-form-urlencoded", **headers)
            else:
                response = client.generic(method, f"{url}?{text}", **headers)
            assert response.status_code < 500, (method, path, name, value, response.content)
            body = response.json()
            assert response.status_code == 200 or isinstance(body["code"], int), body


WITH_BODY = [(path, method) for path, method, _ in ROUTES if method not in ("GET", "HEAD")]


@pytest.mark.parametrize(("path", "method"), WITH_BODY, ids=[f"{m} {p}" for p, m in WITH_BODY])
def test_an_oversized_body_or_a_malformed_content_length_gets_a_binance_error(client, settings, path, method):
    """A break-it review: a body over DATA_UPLOAD_MAX_MEMORY_SIZE, or ``Content-Length: abc``, was a 500 (-1000)."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    url = f"/api/v3/{path}"
    big = client.generic(method, url, "a=" + "x" * 2000, "application/x-www-form-urlencoded")
    assert (big.status_code, big.json()) == (413, {"code": -1100, "msg": "The request body is too large."})
    malformed = client.generic(method, url, "a=1", "application/x-www-form-urlencoded", CONTENT_LENGTH="abc")
    assert malformed.status_code == 400  # apps.core.content_length, before any view
