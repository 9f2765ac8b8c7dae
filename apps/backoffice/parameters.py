"""Admin query parameters holding a NUL character are refused with 400 before any view runs.

The admin's list filters (``?status=``, ``?kind=``, ...) hand their values to PostgreSQL, which cannot hold NUL
in text and raised ``DataError`` (a 500, found by a break-it review). Its forms already refuse NUL
(``ProhibitNullCharactersValidator``), and the REST API answers it per field with a stable code.
"""

from django.conf import settings
from django.http import HttpResponseBadRequest

NUL_REFUSED = "Query parameters cannot contain NUL characters."


class NulQueryParametersRefusedMiddleware:
    """Answer 400 (:data:`NUL_REFUSED`) to a request below ``settings.ADMIN_URL`` whose query string has a NUL in
    a parameter's name or value; other requests pass unchanged."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path_info.startswith(f"/{settings.ADMIN_URL}") and any(
            "\x00" in name or any("\x00" in value for value in values) for name, values in request.GET.lists()
        ):
            return HttpResponseBadRequest(NUL_REFUSED, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
