from rest_framework.permissions import BasePermission

from apps.accounts.errors import SecondFactorRequired
from apps.accounts.models import ApiKey, Scope
from apps.accounts.second_factor import user_has_second_factor


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

    A key's ``withdraw`` scope sends money out (a withdrawal, an address in the book) only while its user has a
    second factor: it was granted with a code, and a second factor turned off (by the user, or reset by an
    operator) takes that away from every key, as from the browser (raises
    :class:`~apps.accounts.errors.SecondFactorRequired`: 403 ``second_factor_required``). Cancelling a withdrawal
    or deleting an address (``DELETE``) lowers the risk and stays open to the key; only ``POST`` adds any.
    """

    message = "This API key lacks the scope this operation needs."

    def has_permission(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return False
        scope = view_scope(view, request.method)
        self.message = f"This API key lacks the {scope} scope this operation needs."  # a new instance per request
        if scope not in request_scopes(request):
            return False
        if scope == Scope.WITHDRAW and request.method == "POST" and isinstance(request.auth, ApiKey):
            if not user_has_second_factor(user_id=request.user.id):
                raise SecondFactorRequired(
                    "This key's withdraw scope works only while the account has a second factor: set one up again "
                    "from the security page."
                )
        return True
