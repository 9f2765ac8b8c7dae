"""The accounts app's domain errors (stable codes, API.md); each names the ``otp`` field."""

from apps.ledger.errors import DomainError


class SecondFactorRequired(DomainError):
    """The operation needs a second factor and the user has none: they must enrol one first (403)."""

    code = "second_factor_required"
    status = 403

    def __init__(self, message: str):
        super().__init__(message, fields={"otp": message})


class InvalidOtp(DomainError):
    """The one-time password is missing, wrong, expired or already used (403)."""

    code = "invalid_otp"
    status = 403

    def __init__(self, message: str = "A valid one-time password from your authenticator is required."):
        super().__init__(message, fields={"otp": message})
