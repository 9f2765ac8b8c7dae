"""WebSocket routes: every path goes to :class:`StreamConsumer`, which answers an unknown one with an error."""

from django.urls import re_path

from .consumers import StreamConsumer

websocket_urlpatterns = [re_path(r"", StreamConsumer.as_asgi())]
