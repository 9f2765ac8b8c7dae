"""Debian's Chromium for the browser tests (never a browser downloaded by Playwright).

``CHROMIUM_PATH`` overrides where it is looked for; ``.ci/run`` installs it with apt.
"""

import os
from pathlib import Path

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
# Without the background-networking flags Chromium keeps calling home, and this sandbox refuses it.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
