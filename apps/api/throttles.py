"""Rate limits with DRF's throttles, counted in Redis (the default cache).

When the counters cannot be reached (Redis down or stalled), a request is let through and a warning logged: a rate
limit protects the service, not anyone's money, and the API keeps working without Redis (orders are answered from
the database, :mod:`apps.orders.services.answers`). Log-in attempts stay limited by django-axes, in the database.
"""

import logging

import redis
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from apps.accounts.models import ApiKey
from exchange.client_ip import client_ip

log = logging.getLogger(__name__)


class _Throttle(SimpleRateThrottle):
    def allow_request(self, request, view):
        """DRF's check; True (logged) when Redis cannot be reached."""
        try:
            return super().allow_request(request, view)
        except redis.RedisError:
            log.warning("api.rate_limit_unavailable", exc_info=True, extra={"scope": self.scope})
            return True

    def get_rate(self):
        # Read the rates when asked, not when the class is defined, so settings changes apply.
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_ident(self, request):
        """The client's IP address as :func:`exchange.client_ip.client_ip` decides it (``TRUSTED_PROXY_COUNT``)."""
        return client_ip(request)


class IpRateThrottle(_Throttle):
    """Every request, authenticated or not, counted per client IP (rate ``ip``)."""

    scope = "ip"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class KeyRateThrottle(_Throttle):
    """Authenticated requests counted per API key, or per user for a browser session (rate ``key``)."""

    scope = "key"

    def get_cache_key(self, request, view):
        if not request.user or not request.user.is_authenticated:
            return None
        ident = f"key{request.auth.id}" if isinstance(request.auth, ApiKey) else f"user{request.user.id}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class LoginRateThrottle(IpRateThrottle):
    """Password log-ins by API, per client IP (rate ``login``)."""

    scope = "login"


class SignUpRateThrottle(IpRateThrottle):
    """Web sign-ups (the form's POSTs, accepted or not) per client IP (rate ``signup``): each new account may have
    e-mail sent (a confirmation link), so accounts are not free to make by the thousand."""

    scope = "signup"


class PasswordResetRateThrottle(IpRateThrottle):
    """Web password-reset requests (the form's POSTs) per client IP (rate ``password_reset``): each may send an
    e-mail, to an address the requester names."""

    scope = "password_reset"
