"""An htmx request of a session no longer logged in sends the whole page to the log-in page.

A view behind the log-in answers a logged-out request with a redirect to the log-in page. htmx follows a redirect
inside its own request and swaps what it gets into the element it was updating, so after a session ended (idle,
logged out elsewhere, its second factor changed) the wallet's balances box showed the log-in page, again every
3 s (review). :class:`HtmxLoginRedirectMiddleware` answers such a request with htmx's ``HX-Redirect`` instead
(django-htmx's ``HttpResponseClientRedirect``): the browser loads the log-in page itself, with its ``next``.
"""

from urllib.parse import urlsplit

from django.conf import settings
from django.shortcuts import resolve_url
from django_htmx.http import HttpResponseClientRedirect


class HtmxLoginRedirectMiddleware:
    """Turn a redirect to ``settings.LOGIN_URL`` answering an htmx request into ``HX-Redirect`` to the same place.
    Goes after django-htmx's ``HtmxMiddleware`` (which marks the request)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            getattr(request, "htmx", False)
            and response.status_code == 302
            and urlsplit(response["Location"]).path == resolve_url(settings.LOGIN_URL)
        ):
            return HttpResponseClientRedirect(response["Location"])
        return response
