"""Password rules shared by every way of setting or giving one: the length cap of the web forms and the API."""

from django.core.exceptions import ValidationError

# The longest password accepted anywhere (``POST /auth/token/`` refuses longer; the web forms cap at the same).
MAX_PASSWORD_LENGTH = 128


class MaximumLengthValidator:
    """A Django password validator (``AUTH_PASSWORD_VALIDATORS``): at most :data:`MAX_PASSWORD_LENGTH` characters.

    Every form that sets a password through ``validate_password`` (sign-up, set and change password, the admin's)
    refuses a longer one with code ``password_too_long``, so no password can be set that the API log-in
    (``POST /auth/token/``, ``max_length`` 128) would refuse.
    """

    def validate(self, password: str, user=None) -> None:
        """Raise :class:`ValidationError` (code ``password_too_long``) for a password over the cap."""
        if len(password) > MAX_PASSWORD_LENGTH:
            raise ValidationError(
                f"This password is too long: use at most {MAX_PASSWORD_LENGTH} characters.",
                code="password_too_long",
            )

    def get_help_text(self) -> str:
        """The rule, for the forms' help texts."""
        return f"Your password must be at most {MAX_PASSWORD_LENGTH} characters."
