"""Signed, expiring tokens for the links e-mailed to traders (confirm an e-mail address, a withdrawal address, a
withdrawal).

A token is Django's signed JSON payload with a timestamp (``django.core.signing``: HMAC with ``SECRET_KEY`` and a
salt per purpose), so a token for one purpose never passes for another and nobody can forge or alter one. Each
caller makes it single-use by a state-guarded write: what the token confirms leaves the state it was issued in.
"""

from django.core import signing

from apps.core.errors import DomainError

MAX_TOKEN_LENGTH = 200  # a token of {"id": n} is about 70 characters


class InvalidLink(DomainError):
    """A confirmation link that is malformed, altered, for another purpose or older than its maximum age."""

    code = "invalid_token"

    def __init__(self, message: str = "This confirmation link is not valid or has expired."):
        super().__init__(message, fields={"token": message})


def signed_token_make(*, salt: str, payload: dict) -> str:
    """A URL-safe token carrying ``payload`` (JSON-serialisable) for the purpose ``salt`` names."""
    return signing.dumps(payload, salt=salt, compress=False)


def signed_token_read(*, salt: str, token: str, max_age: int) -> dict:
    """The payload of ``token``; raises :class:`InvalidLink` when it was not made for ``salt``, was altered, is not
    a dict or is older than ``max_age`` seconds (saying so for the last)."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH:
        raise InvalidLink()
    try:
        payload = signing.loads(token, salt=salt, max_age=max_age)
    except signing.SignatureExpired:
        raise InvalidLink("This confirmation link has expired.") from None
    except signing.BadSignature:
        raise InvalidLink() from None
    if not isinstance(payload, dict):
        raise InvalidLink()
    return payload


def signed_id_read(*, salt: str, token: str, max_age: int) -> int:
    """The object id of a token made of ``{"id": <int>}`` (every link's); raises :class:`InvalidLink` as
    :func:`signed_token_read` does, and for a payload without an integer ``id``."""
    object_id = signed_token_read(salt=salt, token=token, max_age=max_age).get("id")
    if not isinstance(object_id, int):
        raise InvalidLink()
    return object_id
