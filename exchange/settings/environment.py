"""Helpers for reading the environment; importable without configuring Django.

- :func:`load_local_services_env` reads the URLs of the embedded services (written by
  ``devtools/localservices.py``); only local and test settings call it, and variables
  already in the environment win.
- :func:`database_from_url` and :func:`celery_broker_from_redis_url` turn the URLs
  into Django and Celery settings.
"""

import os
from pathlib import Path

import environ

# The custody webhook's shared secret on developer machines and in tests (production refuses it).
DEV_CUSTODY_WEBHOOK_SECRET = "dev-only-custody-webhook-secret"
# The simulated custody provider's adapter: the default for development and tests, refused by production.
SIMULATED_CUSTODY_ADAPTER = "apps.wallets.custody.simulator.provider.SimulatedCustody"


def load_local_services_env() -> None:
    folder = Path(os.environ.get("LOCAL_DATA_DIR", Path(__file__).resolve().parents[2] / ".local"))
    services_env = folder / "services.env"
    if services_env.exists():
        environ.Env.read_env(services_env)


def database_from_url(url: str) -> dict:
    """Parse a PostgreSQL URL; a libpq ``?host=/socket/dir`` query becomes the HOST."""
    config = environ.Env.db_url_config(url)
    options = config.setdefault("OPTIONS", {})
    if not config.get("HOST") and "host" in options:
        config["HOST"] = options.pop("host")
    return config


def celery_broker_from_redis_url(url: str) -> str:
    """Kombu spells a unix-socket Redis ``redis+socket://``; redis-py spells it ``unix://``."""
    if url.startswith("unix://"):
        return "redis+socket://" + url.removeprefix("unix://")
    return url
