"""Rate limits with DRF's throttles, counted in Redis (the default cache) by one atomic script per request.

DRF's ``SimpleRateThrottle`` reads a list of request times from the cache, appends and writes it back: requests
arriving together read the same list and all pass (a security review: 10 threads on one key had 700 of 700
accepted in 6.5 s, against 600 a minute). Here each request is counted with Redis ``INCR`` in a fixed window that
starts with the first request counted and lasts the rate's period (``PEXPIRE``), both in one Lua script: exactly
``limit`` requests pass per window, however many arrive at once; the ones past it get 429 with ``Retry-After``, the
seconds left in the window. Rejected requests count too (a client hammering past its limit gains nothing).

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

# KEYS[1] the counter, ARGV[1] the window in milliseconds: count one request; a counter without an expiry (the first
# of its window) gets the window's. Returns the count and the milliseconds left in the window.
_COUNT = """
local count = redis.call('INCR', KEYS[1])
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {count, redis.call('PTTL', KEYS[1])}
"""


class _Throttle(SimpleRateThrottle):
    # Not DRF's "throttle_%(scope)s_%(ident)s": those keys hold DRF's lists of times, which INCR cannot count.
    cache_format = "throttle:%(scope)s:%(ident)s"

    def allow_request(self, request, view):
        """Count this request in its ident's window (see the module); whether it is within the rate. True (logged)
        when Redis cannot be reached."""
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        key = self.cache.make_and_validate_key(self.key)  # the cache's own prefix and version, as cache.get() uses
        try:
            client = self.cache._cache.get_client(key, write=True)  # Django's RedisCache: its redis-py client
            count, self.left_ms = client.eval(_COUNT, 1, key, self.duration * 1000)
        except redis.RedisError:
            log.warning("api.rate_limit_unavailable", exc_info=True, extra={"scope": self.scope})
            return True
        return count <= self.num_requests

    def wait(self):
        """Seconds until the refused request's window ends (DRF rounds it up for ``Retry-After``)."""
        return self.left_ms / 1000

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
