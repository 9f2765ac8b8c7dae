"""REST API of the streams: the key that opens the caller's user stream (``/api/v1/stream-token/``).

Like Binance's listenKey: ``POST`` creates one (shown once), ``PUT`` keeps it alive another
``STREAMS_TOKEN_TTL`` seconds, ``DELETE`` revokes it. A browser session or an API key with
the ``read`` scope may ask; the key opens that user's stream at ``/ws/<token>``. One made with an API key
lives no longer than that API key (revoked or expired, it opens nothing and its streams are closed). Answers
that show the key carry ``Cache-Control: no-store`` (``never_cache``).
"""

from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.accounts.models import ApiKey
from apps.api.base import ScopedApiView
from apps.api.fields import ApiTime, InputSerializer, Text
from apps.api.idempotency import secret_shown_once

from .services import stream_token_create, stream_token_extend, stream_token_revoke


class StreamTokenIn(InputSerializer):
    token = Text(max_length=64, help_text="A stream key this user created.")


class StreamTokenOut(serializers.Serializer):
    """A user stream key and when it expires unless kept alive."""

    token = serializers.CharField(help_text="Open the user stream at /ws/<token> (or name it in /stream?streams=).")
    expires_at = ApiTime()


@method_decorator(never_cache, name="dispatch")
class StreamTokenApi(ScopedApiView):
    """The caller's user stream key: create, keep alive, revoke."""

    @extend_schema(request=None, responses={201: StreamTokenOut})
    def post(self, request):
        secret_shown_once(request)
        request.data  # noqa: B018 (it takes no body, yet one sent must be well-formed: a 400 or 413, never ignored)
        api_key = request.auth if isinstance(request.auth, ApiKey) else None  # the stream key dies with it
        token, key = stream_token_create(user_id=request.user.id, api_key_id=api_key.pk if api_key else None)
        return Response(StreamTokenOut({"token": key, "expires_at": token.expires_at}).data, status=201)

    @extend_schema(request=StreamTokenIn, responses=StreamTokenOut)
    def put(self, request):
        body = StreamTokenIn(data=request.data)
        body.is_valid(raise_exception=True)
        token = stream_token_extend(user_id=request.user.id, key=body.validated_data["token"])
        return Response(StreamTokenOut({"token": body.validated_data["token"], "expires_at": token.expires_at}).data)

    @extend_schema(request=StreamTokenIn, responses={204: None})
    def delete(self, request):
        body = StreamTokenIn(data=request.data)
        body.is_valid(raise_exception=True)
        stream_token_revoke(user_id=request.user.id, key=body.validated_data["token"])
        return Response(status=204)
