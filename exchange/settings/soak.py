"""Settings of the soak (``bench/soak/``): the deployed settings, with the simulated custody, on 127.0.0.1.

Everything of ``deployed`` holds (``DEBUG`` off, secure cookies, every secret from the
environment) except that static files are served without the hashed manifest, so no
``collectstatic`` is needed before the admin renders a page, and the custody provider is the
simulated one (which ``production`` refuses). The soak's clients stand where the
TLS-terminating proxy would: they send secure cookies over the loopback connection.
"""

from .deployed import *  # noqa: F403
from .deployed import STORAGES
from .environment import SIMULATED_CUSTODY_ADAPTER

STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
CUSTODY_ADAPTER = SIMULATED_CUSTODY_ADAPTER
