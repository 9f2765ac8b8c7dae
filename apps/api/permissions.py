from rest_framework.permissions import BasePermission

from apps.accounts.models import ApiKey


def request_scopes(request) -> set[str]:
    """The scopes of the request: an API key's own, or every scope for a browser session."""
    if isinstance(request.auth, ApiKey):
        return set(request.auth.scopes)
    return {"read", "trade", "withdraw"}


def view_scope(view, method: str) -> str:
    """The scope ``view`` requires for ``method``: its ``method_scopes`` entry, else its ``required_scope``."""
    return getattr(view, "method_scopes", {}).get(method, view.required_scope)


class HasScope(BasePermission):
    """Authenticated, with the scope the view requires for the request's method (:func:`view_scope`).

    Scopes are ``read``, ``trade`` and ``withdraw``; a view names one in ``required_scope``
    and, where methods differ (``GET`` reads, ``POST`` trades), per method in ``method_scopes``.
    """

    message = "This API key lacks the scope this operation needs."

    def has_permission(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return False
        scope = view_scope(view, request.method)
        self.message = f"This API key lacks the {scope} scope this operation needs."  # a new instance per request
        return scope in request_scopes(request)
