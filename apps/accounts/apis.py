"""REST API of the accounts app: exchanging a password for an API key."""

from django.contrib.auth import authenticate
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.api.authentication import ApiKeyAuthentication
from apps.api.throttles import IpRateThrottle, LoginRateThrottle

from .models import Scope
from .services import api_key_create


class TokenIn(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=128, trim_whitespace=False)


class TokenOut(serializers.Serializer):
    token = serializers.CharField()


class TokenApi(APIView):
    """``POST /auth/token/``: a new API key with every scope, for a valid username and password."""

    authentication_classes = [ApiKeyAuthentication]  # gives 401s their WWW-Authenticate header
    permission_classes = [AllowAny]
    throttle_classes = [IpRateThrottle, LoginRateThrottle]

    @extend_schema(request=TokenIn, responses=TokenOut, auth=[])
    def post(self, request):
        credentials = TokenIn(data=request.data)
        credentials.is_valid(raise_exception=True)
        user = authenticate(request._request, **credentials.validated_data)
        if user is None:
            raise AuthenticationFailed("Invalid username or password.")
        _, raw_key = api_key_create(user_id=user.id, name="token (API log-in)", scopes=Scope.values)
        return Response({"token": raw_key})
