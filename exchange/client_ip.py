"""The client's IP address: the socket's peer, or what the configured proxies say it was.

One function decides it for every rule that depends on who is asking: the API's rate limits
(``apps.api.throttles``), the log-in lockouts (django-axes ``AXES_CLIENT_IP_CALLABLE``) and
API keys' IP allow-lists (on HTTP, and on ``/ws-api/v3``'s signed subscriptions: :func:`scope_client_ip`, the
same rule for a WebSocket, read from its ``client``, which the ASGI server must leave the socket's peer: uvicorn
runs with ``--no-proxy-headers``, as the Procfile and README do); and for the address a log-in notice reports
(e-mail and user stream, ``apps.accounts.notifications.login_details``). ``X-Forwarded-For`` is trusted only as far as the setting
``TRUSTED_PROXY_COUNT`` (API.md; default 0) says: each of the N proxies in front of the app
appends the address it received the connection from, so the client is the N-th address from
the right. Anything a client wrote itself sits further left and is ignored.
"""

import ipaddress

from django.conf import settings


def client_ip(request) -> str:
    """The client's IP address (text, as ``REMOTE_ADDR`` spells it) for ``request`` (a Django ``HttpRequest``).

    With ``TRUSTED_PROXY_COUNT`` = 0 it is ``REMOTE_ADDR``. With N > 0 it is the N-th entry from the
    right of ``X-Forwarded-For`` (the leftmost when there are fewer, as DRF's ``NUM_PROXIES`` does);
    ``REMOTE_ADDR`` when the header is missing or that entry is not an IP address. Never raises.
    """
    return _decided(request.META.get("REMOTE_ADDR", ""), request.META.get("HTTP_X_FORWARDED_FOR", ""))


def scope_client_ip(scope: dict) -> str:
    """:func:`client_ip` of an ASGI connection (a WebSocket's ``scope``): its ``client`` address and its
    ``X-Forwarded-For`` headers (several are one list, in order). Never raises."""
    remote = (scope.get("client") or ("", 0))[0]
    forwarded = ", ".join(
        value.decode("latin-1") for name, value in scope.get("headers", ()) if name == b"x-forwarded-for"
    )
    return _decided(remote, forwarded)


def _decided(remote: str, forwarded: str) -> str:
    """The client among the socket's peer ``remote`` and the ``forwarded`` list (see :func:`client_ip`)."""
    proxies = settings.TRUSTED_PROXY_COUNT
    if proxies <= 0 or not forwarded:
        return remote
    hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
    if not hops:
        return remote
    candidate = hops[-min(proxies, len(hops))]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return remote
