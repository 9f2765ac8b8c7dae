"""The commands that drive the simulated custody (``seed_demo``, ``simulate_deposit``,
``run_custody_simulator``) run only where it is the configured provider: never in production."""

from django.conf import settings
from django.core.management.base import CommandError
from django.utils.module_loading import import_string

from .provider import SimulatedCustody


def simulated_custody_required(command: str) -> SimulatedCustody:
    """The configured custody adapter, when it is the simulated provider.

    Raises :class:`CommandError` (exit 1, naming ``command`` and ``CUSTODY_ADAPTER``) for any
    other adapter, such as a real provider's in production, which refuses the simulator itself.
    """
    try:
        adapter = import_string(settings.CUSTODY_ADAPTER)
    except ImportError:
        adapter = None
    if not (isinstance(adapter, type) and issubclass(adapter, SimulatedCustody)):
        raise CommandError(
            f"{command} works only with the simulated custody (development and tests); "
            f"CUSTODY_ADAPTER is {settings.CUSTODY_ADAPTER!r}."
        )
    return adapter()
