"""The API's own views (not the apps' endpoints, which live in each app's ``apis.py``)."""

from django.http import JsonResponse

from .exceptions import error_body


def api_not_found(request, *args, **kwargs) -> JsonResponse:
    """Any path under the API's prefix that no route matches: a 404 in the API's error shape, not HTML."""
    message = "No such API path." if request.path.endswith("/") else "No such API path: paths end with a slash."
    return JsonResponse(error_body("not_found", message), status=404)
