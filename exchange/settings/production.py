"""Production settings: the deployed settings (``deployed``) with a real custody provider, named explicitly.

Production refuses to start when ``CUSTODY_ADAPTER`` is unset or names the simulated provider
(hole 2): the simulator mints coins on request (``seed_demo``, ``simulate_deposit``) and is also
the provider ``reconcile`` compares the ledger with, so nothing would notice.
"""

from django.core.exceptions import ImproperlyConfigured

from .deployed import *  # noqa: F403
from .deployed import env
from .environment import SIMULATED_CUSTODY_ADAPTER

CUSTODY_ADAPTER = env("CUSTODY_ADAPTER")  # no default: "Set the CUSTODY_ADAPTER environment variable"
if CUSTODY_ADAPTER.strip().startswith(SIMULATED_CUSTODY_ADAPTER.rsplit(".", 2)[0]):  # the simulator's package
    raise ImproperlyConfigured(
        "CUSTODY_ADAPTER names the simulated custody, which is for development and tests only: "
        "set the dotted path of your custody provider's adapter."
    )
