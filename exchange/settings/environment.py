"""Helpers for reading the environment; importable without configuring Django.

- :func:`load_local_services_env` reads the URLs of the embedded services (written by
  ``devtools/localservices.py``); only local and test settings call it, and variables
  already in the environment win.
- :func:`database_from_url` and :func:`celery_broker_from_redis_url` turn the URLs
  into Django and Celery settings.
"""

import os
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

import environ

# The custody webhook's shared secret on developer machines and in tests (production refuses it).
DEV_CUSTODY_WEBHOOK_SECRET = "dev-only-custody-webhook-secret"
# The simulated custody provider's adapter: the default for development and tests, refused by production.
SIMULATED_CUSTODY_ADAPTER = "apps.wallets.custody.simulator.provider.SimulatedCustody"


def load_local_services_env() -> None:
    """Read ``<LOCAL_DATA_DIR>/services.env`` into the environment (variables already set win).

    Raises ``ImproperlyConfigured`` saying what to do when neither it nor ``DATABASE_URL`` gives a database
    (the embedded services were never started under this ``LOCAL_DATA_DIR``).
    """
    services_env = local_data_dir() / "services.env"
    if services_env.exists():
        environ.Env.read_env(services_env)
    if "DATABASE_URL" not in os.environ:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"No database: DATABASE_URL is not set and no embedded services were started under {services_env.parent} "
            "(no services.env there). Run `make run` or `make migrate` first, with the same LOCAL_DATA_DIR as "
            "this command, or set DATABASE_URL."
        )


def local_data_dir() -> Path:
    """The embedded services' data folder (``LOCAL_DATA_DIR``, default ``.local`` in the checkout)."""
    return Path(os.environ.get("LOCAL_DATA_DIR", Path(__file__).resolve().parents[2] / ".local"))


def local_signing_key() -> str:
    """The development ``LEDGER_SIGNING_KEY`` (hex): read from ``<LOCAL_DATA_DIR>/ledger-signing-key``,
    generated there (readable by its owner only) on first use."""
    from apps.ledger.signing import private_key_generate_hex

    path = local_data_dir() / "ledger-signing-key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(private_key_generate_hex() + "\n")
    return path.read_text().strip()


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


def pubsub_prefix(name: str, redis_url: str) -> str:
    """``name`` as the prefix of an install's Redis pub/sub channels on ``redis_url``: with the URL's database
    number when it is not 0 (``streams`` on ``redis://host:6379/2``: ``streams.db2``). Pub/sub ignores the
    database number ("Pub/Sub has no relation to the key space",
    https://redis.io/docs/latest/develop/interact/pubsub/#database--scoping), so two installs kept apart by it
    (their cache and Celery queues are) would otherwise hear each other's stream events, a user's included."""
    from redis.connection import parse_url

    number = parse_url(redis_url).get("db") or 0
    return name if not number else f"{name}.db{number}"


SITE_PATHS = frozenset(
    {
        "accounts",
        "activity",
        "api",
        "api-keys",
        "custody",
        "email",
        "fills",
        "healthz",
        "markets",
        "not-served",
        "orders",
        "proofs",
        "security",
        "signup",
        "static",
        "wallet",
    }
)
"""The first path segments the site serves besides the back office (``exchange/urls.py``, and ``static`` for the
static files; a test holds them equal to the URLconf's): a ``DJANGO_ADMIN_URL`` starting with one would take that
part of the site over (the admin is mounted first, with its catch-all)."""


def admin_url_checked(value: str) -> str:
    """``DJANGO_ADMIN_URL`` as production takes it: a path of the deployment's own, lower case, ending in ``/``; not
    empty, ``admin/``, .env.example's placeholder, nor under a path the site serves (:data:`SITE_PATHS`: break-it
    review, ``custody/`` swallowed the custody webhook and ``api/`` the API). Raises ``ImproperlyConfigured``."""
    from django.core.exceptions import ImproperlyConfigured

    first = value.split("/", 1)[0]
    if (
        not re.fullmatch(r"[a-z0-9][a-z0-9_-]*/([a-z0-9_-]+/)*", value)
        or first in {"admin", "ops-change-me"} | SITE_PATHS
    ):
        raise ImproperlyConfigured(
            "DJANGO_ADMIN_URL must be a path of your own ending in / (ops-4b1d/): lower case, not empty, admin/, the "
            f"placeholder, nor under one of the site's own paths ({', '.join(sorted(SITE_PATHS))})."
        )
    return value


def throttle_rate(env, name: str, *, default: str) -> str:
    """The request rate ``name`` sets (``10/min``: DRF's throttle rate), checked at start-up: ``lots`` started, then
    answered every API request 500 (break-it review). Raises ``ImproperlyConfigured`` naming the variable."""
    from django.core.exceptions import ImproperlyConfigured

    rate = env(name, default=default)
    if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", rate):
        raise ImproperlyConfigured(f"{name} is <requests>/<second|minute|hour|day> (10/min), not {rate!r}.")
    return rate


def fraction(env, name: str, *, default: str) -> Decimal:
    """The fraction ``name`` sets (``0.01`` is 1 %): a Decimal from 0 to below 1. Raises ``ImproperlyConfigured``
    naming the variable otherwise (break-it review: ``FEE_RATE_MAX=5`` and ``abc`` started)."""
    from django.core.exceptions import ImproperlyConfigured

    text = env(name, default=default)
    try:
        value = Decimal(text)
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite() or not 0 <= value < 1:
        raise ImproperlyConfigured(f"{name} is a fraction from 0 to below 1 (0.01 is 1 %), not {text!r}.")
    return value


def amounts_by_asset(raw: dict[str, str], *, name: str) -> dict[str, Decimal]:
    """``{asset code: amount}`` from a django-environ dict (``BTC=0.5,USDT=10000``): each a finite Decimal, 0 or
    more. Raises ``ImproperlyConfigured`` naming the variable otherwise, so a typo stops the start."""
    from django.core.exceptions import ImproperlyConfigured

    amounts = {}
    for code, text in raw.items():
        try:
            amount = Decimal(str(text))
        except InvalidOperation:
            amount = None
        if amount is None or not amount.is_finite() or amount < 0:
            raise ImproperlyConfigured(f"{name}: {code}={text!r} is not an amount of 0 or more.")
        amounts[code.strip().upper()] = amount  # asset codes are upper case: btc=0.5 guarded nothing (break-it review)
    return amounts
