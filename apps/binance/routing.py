"""WebSocket routes of the Binance surface, tried before apps.streams' (which take every other path)."""

from django.urls import re_path

from .sockets import MarketSocket, WsApiConsumer

websocket_urlpatterns = [
    re_path(r"^ws/[0-9]{1,3}$", MarketSocket.as_asgi()),
    re_path(r"^ws-api/v3$", WsApiConsumer.as_asgi()),
]
