from rest_framework.permissions import BasePermission

from apps.accounts.models import ApiKey


def request_scopes(request) -> set[str]:
    """The scopes of the request: an API key's own, or every scope for a browser session."""
    if isinstance(request.auth, ApiKey):
        return set(request.auth.scopes)
    return {"read", "trade", "withdraw"}


class HasScope(BasePermission):
    """Authenticated, with the scope the view names in ``required_scope`` (``read``, ``trade``, ``withdraw``)."""

    message = "This API key lacks the scope this operation needs."

    def has_permission(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return False
        return view.required_scope in request_scopes(request)
