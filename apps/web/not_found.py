"""The web UI's own "not found" page, whatever ``DEBUG`` says.

Django shows its technical 404 page (with the URL patterns) when ``DEBUG`` is on, as under
``make run``; a trader following a stale market link should see the site's page instead.
With ``DEBUG`` off, Django's default handler renders the same ``templates/404.html``.
"""

from django.http import Http404
from django.shortcuts import render

TEMPLATE = "404.html"


def not_found(request, exception=None):
    """``templates/404.html`` with status 404."""
    return render(request, TEMPLATE, {"request_path": request.path}, status=404)


class NotFoundMiddleware:
    """Renders :data:`TEMPLATE` for an ``Http404`` raised by a view of the web UI (URL namespace ``web``).

    The API (its own JSON errors) and the admin are left alone.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        match = request.resolver_match
        if isinstance(exception, Http404) and match is not None and match.app_name == "web":
            return not_found(request, exception)
        return None
