"""ASGI entry point (uvicorn): HTTP to Django, WebSocket to the streams (Django Channels).

``make run``, the soak and production serve HTTP with a WSGI server (runserver, gunicorn) and
the streams with ``uvicorn exchange.asgi:application``; this application also answers HTTP, so
one uvicorn can serve both where that is simpler.
"""

import os

from django.core.asgi import get_asgi_application

# A deployment's servers default to the production settings: unset, gunicorn served the local ones, DEBUG on, to
# any request naming 127.0.0.1 as its host (break-it review). ``make run``, the tests and the benches name theirs.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exchange.settings.production")

django_application = get_asgi_application()  # sets Django up before the consumers are imported

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from apps.binance.routing import websocket_urlpatterns as binance_websocket_urlpatterns  # noqa: E402
from apps.streams.connections import ConnectionsPerAddress  # noqa: E402
from apps.streams.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_application,
        "websocket": ConnectionsPerAddress(URLRouter(binance_websocket_urlpatterns + websocket_urlpatterns)),
    }
)
