from rest_framework import authentication, exceptions

from apps.accounts.services import api_key_authenticate


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """``Authorization: Token <key>``: authenticates as the key's user; ``request.auth`` is the ApiKey."""

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
        key = api_key_authenticate(raw_key)
        if key is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        return key.user, key

    def authenticate_header(self, request):
        return self.keyword
