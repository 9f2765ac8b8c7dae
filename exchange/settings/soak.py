"""Settings of the soak (``bench/soak.py``): the production settings, served on plain HTTP on 127.0.0.1.

Everything of ``production`` holds (``DEBUG`` off, secure cookies, every secret from the
environment) except that static files are served without the hashed manifest, so no
``collectstatic`` is needed before the admin renders a page. The soak's clients stand where
the TLS-terminating proxy would: they send secure cookies over the loopback connection.
"""

from .production import *  # noqa: F403
from .production import STORAGES

STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
