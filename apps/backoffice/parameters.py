"""Bad parameters in the admin are a 400 with the reason, never a 500.

The Django admin hands what a URL carries to PostgreSQL: list filters and lookups (``?status=``, ``?id__regex=(``,
``?created_at__year=0``), an object id in the path, the ids an action is given. Values PostgreSQL or Python cannot
take raised ``DataError``, ``ValueError``, ``IndexError`` or ``OverflowError``: 500s, found by break-it reviews.
A NUL in a query parameter is refused before any view runs; the rest are caught when the admin view raises them.
The admin's forms already refuse NUL (``ProhibitNullCharactersValidator``), and the REST API answers bad input per
field with a stable code.
"""

import logging

from django.conf import settings
from django.db import DataError
from django.http import HttpResponseBadRequest

log = logging.getLogger(__name__)

NUL_REFUSED = "Query parameters cannot contain NUL characters."
PARAMETERS_REFUSED = "The request's parameters are not valid here (a filter, a lookup, an id or a date out of range)."
BAD_PARAMETER_ERRORS = (DataError, ValueError, IndexError, OverflowError)


def _bad_request(text: str) -> HttpResponseBadRequest:
    return HttpResponseBadRequest(text, content_type="text/plain; charset=utf-8")


class AdminParametersMiddleware:
    """Below ``settings.ADMIN_URL``: 400 (:data:`NUL_REFUSED`) for a NUL in a query parameter's name or value, and
    400 (:data:`PARAMETERS_REFUSED`) when the admin view raises one of :data:`BAD_PARAMETER_ERRORS` (logged with its
    traceback, so that a real bug still shows). Other requests pass unchanged."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if _in_admin(request) and any(
            "\x00" in name or any("\x00" in value for value in values) for name, values in request.GET.lists()
        ):
            return _bad_request(NUL_REFUSED)
        return self.get_response(request)

    def process_exception(self, request, exception):
        if _in_admin(request) and isinstance(exception, BAD_PARAMETER_ERRORS):
            log.warning("admin.bad_parameters path=%s", request.path, exc_info=exception)
            return _bad_request(PARAMETERS_REFUSED)
        return None


def _in_admin(request) -> bool:
    return request.path_info.startswith(f"/{settings.ADMIN_URL}")
