"""Signed, expiring tokens for the links e-mailed to traders (confirm an address, confirm a withdrawal).

A token is Django's signed ``{"id": <object id>}`` with a timestamp (``django.core.signing``,
HMAC with ``SECRET_KEY`` and a salt per purpose), so a token for one purpose never passes for
another and nobody can forge or alter one. It is single-use because confirming is a
state-guarded write: the object leaves the state the token confirms.
"""

from django.core import signing

from apps.core.errors import DomainError


class InvalidLink(DomainError):
    """A confirmation link that is malformed, altered, for another purpose or older than its maximum age."""

    code = "invalid_token"

    def __init__(self, message: str = "This confirmation link is not valid or has expired."):
        super().__init__(message, fields={"token": message})


def link_token_make(*, purpose: str, object_id: int) -> str:
    """A URL-safe token naming ``object_id`` for ``purpose`` (a short name such as ``withdrawal-address``)."""
    return signing.dumps({"id": object_id}, salt=f"wallets.link.{purpose}", compress=False)


def link_token_read(*, purpose: str, token: str, max_age: int) -> int:
    """The object id in ``token``; raises :class:`InvalidLink` when it is not valid for ``purpose`` or is older
    than ``max_age`` seconds."""
    if not isinstance(token, str) or len(token) > 200:
        raise InvalidLink()
    try:
        payload = signing.loads(token, salt=f"wallets.link.{purpose}", max_age=max_age)
    except signing.SignatureExpired:
        raise InvalidLink("This confirmation link has expired.") from None
    except signing.BadSignature:
        raise InvalidLink() from None
    if not isinstance(payload, dict) or not isinstance(payload.get("id"), int):
        raise InvalidLink()
    return payload["id"]
