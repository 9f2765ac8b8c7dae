"""The links e-mailed to traders to confirm a withdrawal address or a withdrawal: a signed ``{"id": <object id>}``
per purpose (:mod:`apps.core.links`)."""

from apps.core.links import InvalidLink, signed_id_read, signed_token_make

__all__ = ["InvalidLink", "link_token_make", "link_token_read"]


def _salt(purpose: str) -> str:
    return f"wallets.link.{purpose}"


def link_token_make(*, purpose: str, object_id: int) -> str:
    """A URL-safe token naming ``object_id`` for ``purpose`` (a short name such as ``withdrawal-address``)."""
    return signed_token_make(salt=_salt(purpose), payload={"id": object_id})


def link_token_read(*, purpose: str, token: str, max_age: int) -> int:
    """The object id in ``token``; raises :class:`InvalidLink` when it is not valid for ``purpose`` or is older
    than ``max_age`` seconds."""
    return signed_id_read(salt=_salt(purpose), token=token, max_age=max_age)
