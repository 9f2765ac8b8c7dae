"""A request whose ``Content-Length`` is not a number is refused with 400 before any view reads its body.

Django reads the header with ``int()`` when a view touches ``request.body`` (a form, a JSON body): a value such as
``abc`` raised ``ValueError``, a 500 (found by a break-it review on ``make run``'s development server; gunicorn and
uvicorn refuse such a request themselves).
"""

from django.http import HttpResponseBadRequest

CONTENT_LENGTH_REFUSED = "The Content-Length header is not a number."


class ContentLengthMiddleware:
    """Answer 400 (:data:`CONTENT_LENGTH_REFUSED`) to a request with a ``Content-Length`` that is not digits."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        length = request.META.get("CONTENT_LENGTH")
        if length and not (length.isascii() and length.isdigit()):
            return HttpResponseBadRequest(CONTENT_LENGTH_REFUSED, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
