"""REST API of the accounts app: exchanging a password (and a second factor) for an API key."""

from django.contrib.auth import authenticate
from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.models import Scope
from apps.accounts.passwords import MAX_PASSWORD_LENGTH
from apps.accounts.services import api_key_create

from .authentication import ApiKeyAuthentication
from .fields import ApiTime, InputSerializer
from .idempotency import secret_shown_once
from .throttles import IpRateThrottle, LoginRateThrottle

DEFAULT_NAME = "token (API log-in)"


class TokenIn(InputSerializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=MAX_PASSWORD_LENGTH, trim_whitespace=False)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=Scope.values), min_length=1, max_length=3, default=["read"]
    )
    otp = serializers.CharField(
        max_length=16, required=False, allow_blank=True, help_text="A code from the user's authenticator."
    )
    expires_in = serializers.IntegerField(required=False, help_text="Seconds from now (60 or more).")
    name = serializers.CharField(max_length=100, required=False, default=DEFAULT_NAME)
    # Judged by api_key_create, which names these fields when it refuses a value (as for the web page's form).
    allowed_ips = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        default=list,
        help_text="IP addresses or networks (203.0.113.7, 2001:db8::/48), at most 20: the key is refused from any "
        "other client address.",
    )
    withdrawal_addresses = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        default=list,
        help_text="At most 20 addresses: withdrawals with this key may go only there.",
    )


class TokenOut(serializers.Serializer):
    """A new API key: its token and signing secret, shown only in this answer."""

    # Writes a NewApiKey (apps.accounts.services.api_key_create).
    token = serializers.CharField(
        source="raw_key", help_text="Authorization: Token <token> (X-MBX-APIKEY on /api/v3/)."
    )
    secret = serializers.CharField(help_text="Signs /api/v3/ requests (HMAC-SHA256); shown only here.")
    scopes = serializers.ListField(source="key.scopes", child=serializers.CharField())
    expires_at = ApiTime(source="key.expires_at", allow_null=True)


@method_decorator(never_cache, name="dispatch")
class TokenApi(APIView):
    """``POST /auth/token/``: a new API key for a valid username and password (API.md).

    Scopes default to ``read``. A second factor code (``otp``) is required for the ``withdraw``
    scope (a user without a second factor gets ``second_factor_required``: enrol first), and for
    any scope once the user has a second factor (``invalid_otp`` when missing or wrong). The key
    is permanent unless ``expires_in`` (seconds) is given; ``allowed_ips`` and ``withdrawal_addresses``
    (optional lists) restrict where it is accepted from and where it may withdraw to. An account has at most
    ``API_KEY_MAX_ACTIVE`` active keys (``too_many_api_keys``). Wrong passwords count towards the
    log-in lockout (django-axes) and the ``login`` rate. The answer shows the key's secret: ``Cache-Control:
    no-store`` (``never_cache``), so no browser or proxy cache keeps it.
    """

    authentication_classes = [ApiKeyAuthentication]  # gives 401s their WWW-Authenticate header
    permission_classes = [AllowAny]
    throttle_classes = [IpRateThrottle, LoginRateThrottle]

    @extend_schema(request=TokenIn, responses=TokenOut, auth=[])
    def post(self, request):
        secret_shown_once(request)
        body = TokenIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        user = authenticate(request._request, username=data["username"], password=data["password"])
        if user is None:
            raise AuthenticationFailed("Invalid username or password.")
        created = api_key_create(
            user_id=user.id,
            name=data["name"],
            scopes=data["scopes"],
            expires_in=data.get("expires_in"),
            otp=data.get("otp"),
            allowed_ips=data["allowed_ips"],
            withdrawal_addresses=data["withdrawal_addresses"],
            password_hash=user.password,  # as authenticated: refused if a change or reset commits meanwhile
        )
        return Response(TokenOut(created).data)
