"""Read the URLs of the embedded services (written by ``devtools/localservices.py``).

Only local and test settings call this; variables already in the environment win.
"""

import os
from pathlib import Path

import environ


def load_local_services_env() -> None:
    folder = Path(os.environ.get("LOCAL_DATA_DIR", Path(__file__).resolve().parents[2] / ".local"))
    services_env = folder / "services.env"
    if services_env.exists():
        environ.Env.read_env(services_env)
