"""``/api/v3/userDataStream``: Binance's listenKey, which is our user stream key (apps.streams).

``POST`` creates a key (valid ``STREAMS_TOKEN_TTL`` seconds, 60 minutes by default, as Binance's), or returns
the one the API key has, kept alive, as Binance returns the account's active listenKey;
``PUT`` with ``listenKey`` keeps it alive; ``DELETE`` closes it. The key opens the user's stream at
``/ws/<listenKey>`` (``executionReport``, ``outboundAccountPosition``). It needs an API key (with
the ``read`` scope) and no signature (Binance's ``USER_STREAM`` security); an unknown, expired or
another user's listenKey is -1125. A listenKey lives no longer than the API key that created it: revoked or
expired, the key's listenKeys open nothing and their streams are closed (``listenKeyExpired``, 4401).
"""

from apps.core.errors import NotFound
from apps.streams.services import stream_token_extend, stream_token_of_api_key, stream_token_revoke

from .endpoint import Call, Security, endpoint
from .errors import INVALID_LISTEN_KEY, BinanceError, mandatory

_LISTEN_KEY_MISSING = BinanceError(INVALID_LISTEN_KEY, "This listenKey does not exist.")


def _listen_key(call: Call) -> str:
    key = call.params.raw("listenKey")
    if key is None:
        raise mandatory("listenKey")
    if len(key) != 64 or not key.isalnum():
        raise _LISTEN_KEY_MISSING
    return key


@endpoint(weight=2, security=Security.USER_STREAM)
def listen_key_create(call: Call) -> dict:
    _, key = stream_token_of_api_key(user_id=call.user_id, api_key_id=call.api_key.pk)  # dies with the API key
    return {"listenKey": key}


@endpoint(weight=2, security=Security.USER_STREAM, params=("listenKey",))
def listen_key_keepalive(call: Call) -> dict:
    try:
        stream_token_extend(user_id=call.user_id, key=_listen_key(call))
    except NotFound:
        raise _LISTEN_KEY_MISSING from None
    return {}


@endpoint(weight=2, security=Security.USER_STREAM, params=("listenKey",))
def listen_key_close(call: Call) -> dict:
    try:
        stream_token_revoke(user_id=call.user_id, key=_listen_key(call))
    except NotFound:
        raise _LISTEN_KEY_MISSING from None
    return {}
