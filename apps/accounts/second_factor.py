"""Traders' second factor (TOTP through django-otp): who has one, and checking a code.

Enrolment (a QR code, the base32 secret, recovery codes) lives in the web UI and the API;
every path that needs a second factor (withdrawals, API keys with the ``withdraw`` scope,
the token endpoint) asks these two functions, so the rule is decided in one place.
"""

from django_otp.plugins.otp_totp.models import TOTPDevice


def user_has_second_factor(*, user_id: int) -> bool:
    """Whether the user has confirmed a TOTP authenticator."""
    return TOTPDevice.objects.filter(user_id=user_id, confirmed=True).exists()


def second_factor_verify(*, user_id: int, code: str | None) -> bool:
    """Whether ``code`` (6 digits from the user's authenticator) is valid now for one of their confirmed devices.

    False for an empty code or a user with no confirmed device. django-otp refuses a code
    already used (its ``last_t`` throttle), so a code cannot be replayed.
    """
    code = (code or "").strip()
    if not code:
        return False
    return any(device.verify_token(code) for device in TOTPDevice.objects.filter(user_id=user_id, confirmed=True))
