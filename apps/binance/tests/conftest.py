"""Fixtures of the Binance surface's tests: a little trading on BTC-USDT, signing keys, a live ASGI server."""

import pytest

from apps.orders.tests.helpers import place


@pytest.fixture
def traded(btc_usdt, funded_user):
    """A buys 0.1 at 59,900 from M (one fill), then B sells 0.3 into M's bids at 59,000 and 58,900 (two fills).

    Left resting: M's bid 0.1 at 58,900 and ask 0.5 at 61,000. Returns (M, A, B).
    """
    maker = funded_user(btc="2", usdt="100000")
    buyer, seller = funded_user(usdt="100000"), funded_user(btc="1")
    place(maker, side="sell", price="59900", qty="0.1")
    place(buyer, side="buy", price="60000", qty="0.1")
    place(maker, side="buy", price="59000", qty="0.2")
    place(maker, side="buy", price="58900", qty="0.2")
    place(seller, side="sell", price="58900", qty="0.3")
    place(maker, side="sell", price="61000", qty="0.5")
    return maker, buyer, seller


@pytest.fixture
def signing_key():
    """``signing_key(user, "read", "trade")`` -> ``(api key, signing secret)`` of a new key with those scopes."""
    from apps.accounts.services import api_key_create

    def make(user, *scopes):
        created = api_key_create(user_id=user.id, name="bot", scopes=scopes or ("read",))
        return created.raw_key, created.secret

    return make


@pytest.fixture
def live_asgi(stream_servers):
    """``host:port`` of a uvicorn process serving ``exchange.asgi`` (HTTP and WebSockets) with the streams'
    relay beside it, both reading the test database (tests using it are ``transaction=True``): the session's
    :func:`stream_servers`. A relay of its own would wait for ever on the one relay lock whenever apps.streams'
    tests had started the session's first (``pytest apps/streams apps/binance``: "run_stream_relay did not
    start")."""
    return stream_servers.webs[0]
