from rest_framework import authentication, exceptions

from apps.accounts.services import api_key_authenticate
from apps.core.errors import PermissionDenied
from exchange.client_ip import client_ip


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """``Authorization: Token <key>``: authenticates as the key's user; ``request.auth`` is the ApiKey.

    An unknown, revoked or expired key is a 401; a key whose IP allow-list does not hold the
    client (:func:`exchange.client_ip.client_ip`) a 403.
    """

    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header.")
        try:
            raw_key = header[1].decode()
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        try:
            key = api_key_authenticate(raw_key, client_ip=client_ip(request))
        except PermissionDenied as refused:  # an IP allow-list that does not hold the client
            raise exceptions.PermissionDenied(refused.message) from None
        if key is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        return key.user, key

    def authenticate_header(self, request):
        return self.keyword
