"""Custody: the interface to the provider that holds the exchange's coins, and its default, simulated provider.

:func:`get_adapter` returns the configured adapter (``settings.CUSTODY_ADAPTER``). The
rest of the wallets app talks to custody only through it.
"""

from django.conf import settings
from django.utils.module_loading import import_string

from .base import CustodyAdapter


def get_adapter() -> CustodyAdapter:
    """An instance of the adapter named by ``settings.CUSTODY_ADAPTER``."""
    return import_string(settings.CUSTODY_ADAPTER)()
