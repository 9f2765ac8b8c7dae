"""Web forms whose POSTs are limited per client IP, with the API's throttles (:mod:`apps.api.throttles`)."""

from django.shortcuts import render

from apps.api.throttles import IpRateThrottle


class ThrottledPostMixin:
    """For a Django form view: past ``throttle``'s rate (an :class:`IpRateThrottle` subclass), a POST gets the form
    again, unbound (nothing sent is checked: a log-in form would still authenticate), with ``throttled_message`` and
    status 429, and nothing else is done."""

    throttle: type[IpRateThrottle]
    throttled_message: str

    def post(self, request, *args, **kwargs):
        if not self.throttle().allow_request(request, None):
            unbound = {name: value for name, value in self.get_form_kwargs().items() if name not in ("data", "files")}
            form = self.get_form_class()(**unbound)
            form.cleaned_data = {}  # what add_error expects of a form that was cleaned; an unbound one never is
            form.add_error(None, self.throttled_message)
            return render(request, self.template_name, {"form": form}, status=429)
        return super().post(request, *args, **kwargs)
