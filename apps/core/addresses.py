"""Address validation, one pluggable validator per network (``settings.WALLETS_ADDRESS_VALIDATORS``).

Shared by the wallets (withdrawals, the address book) and the accounts (an API key's withdrawal allow-list),
so it sits in the core below both (DESIGN.md section 1).

A validator is a function ``validate(address) -> None`` raising :class:`InvalidAddress`.
A network without a validator accepts no address at all.
"""

from django.conf import settings
from django.utils.module_loading import import_string

from .errors import InvalidAddress

MAX_ADDRESS_LENGTH = 128


def address_validate(*, network: str, address: object) -> str:
    """Return ``address`` if it is a valid address on ``network``; raise :class:`InvalidAddress` (field ``address``).

    Nothing is trimmed or case-folded: what is validated is what will be used.
    """
    if not isinstance(address, str) or not address:
        raise InvalidAddress("An address is required.")
    if len(address) > MAX_ADDRESS_LENGTH or not address.isascii() or not address.isprintable():
        raise InvalidAddress(f"Not a valid {network} address.")
    path = settings.WALLETS_ADDRESS_VALIDATORS.get(network)
    if path is None:
        raise InvalidAddress(f"Addresses on {network} cannot be validated, so none is accepted.")
    import_string(path)(address)
    return address
