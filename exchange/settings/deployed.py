"""Settings of every deployed server (production, and the soak's copy of it): secrets from the environment.

Every secret must come from the environment, or start-up fails. ``production`` adds the one
rule the soak cannot follow: a real custody provider, named explicitly.
"""

from django.core.exceptions import ImproperlyConfigured

from apps.ledger.signing import SigningKeyError, private_key_load, public_key_load

from .base import *  # noqa: F403
from .base import LOGGING, MIDDLEWARE, env

DEBUG = False
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS")
ADMIN_URL = env("DJANGO_ADMIN_URL")


# .env.example's placeholders, and values that switch a protection off (break-it review: each started silently).
def _too_wide(host: str) -> bool:
    """``*``, empty, .env.example's placeholder, or a whole top-level domain (``.com`` matches every .com host)."""
    host = host.strip().lower()
    return host in ("*", "", "exchange.example.com") or (host.startswith(".") and host.count(".") < 2)


if not ALLOWED_HOSTS or any(_too_wide(host) for host in ALLOWED_HOSTS):
    raise ImproperlyConfigured(
        "DJANGO_ALLOWED_HOSTS must name this exchange's own host names: not *, empty, a whole top-level domain "
        "(.com), or .env.example's placeholder."
    )

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # a supervisor probes gunicorn itself, over plain HTTP (README, Production)
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_CONTENT_TYPE_NOSNIFF = True

# Values published in this repository (.env.example's placeholders, the local and test defaults) are no
# secrets: a deployment copied from the example would let anyone forge custody callbacks or sessions.
PUBLISHED_SECRET_PREFIXES = ("change-me", "dev-only", "test-only")
for _name in ("DJANGO_SECRET_KEY", "CUSTODY_WEBHOOK_SECRET", "API_SECRET_ENCRYPTION_KEY"):
    if env(_name).strip().lower().startswith(PUBLISHED_SECRET_PREFIXES):
        raise ImproperlyConfigured(f"{_name} is a published placeholder or development value: set your own secret.")

# The custody webhook's shared secret, and the key of API keys' signing secrets, must be real secrets; the session
# key too, by Django's own measure (check --deploy's W009: 50 characters, 5 of them different). Each its own, so that
# each can be rotated alone (README).
SECRETS = {"DJANGO_SECRET_KEY": 50, "CUSTODY_WEBHOOK_SECRET": 32, "API_SECRET_ENCRYPTION_KEY": 32}
for _name, _length in SECRETS.items():
    if len(env(_name)) < _length:
        raise ImproperlyConfigured(f"{_name} must be at least {_length} characters.")
    if len(set(env(_name))) < 5:  # forty spaces, or forty times the same letter (break-it review)
        raise ImproperlyConfigured(f"{_name} must be random: it repeats fewer than 5 different characters.")
if len({env(_name) for _name in SECRETS}) < len(SECRETS):
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY, CUSTODY_WEBHOOK_SECRET and API_SECRET_ENCRYPTION_KEY must be three different secrets."
    )

# Blocks and liabilities snapshots are signed with this key: without it nothing could be verified.
if not env("LEDGER_SIGNING_KEY", default=""):
    raise ImproperlyConfigured("Set the LEDGER_SIGNING_KEY environment variable (an Ed25519 private key, hex or PEM).")
try:
    private_key_load(env("LEDGER_SIGNING_KEY"))
except SigningKeyError as exc:
    raise ImproperlyConfigured(f"LEDGER_SIGNING_KEY is not usable: {exc}") from None
if len(set(env("LEDGER_SIGNING_KEY").strip().lower())) < 5:  # 64 zeros is a key anyone can sign with
    raise ImproperlyConfigured("LEDGER_SIGNING_KEY must be random: it repeats fewer than 5 different characters.")
for _listed in env.list("LEDGER_TRUSTED_PUBLIC_KEYS", default=[]):  # read at start-up, not at the first verification
    try:
        public_key_load(_listed)
    except SigningKeyError as exc:
        raise ImproperlyConfigured(f"LEDGER_TRUSTED_PUBLIC_KEYS: {exc}.") from None

# Static files served by the app itself (collectstatic at deploy time).
MIDDLEWARE = [MIDDLEWARE[0], "whitenoise.middleware.WhiteNoiseMiddleware", *MIDDLEWARE[1:]]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# JSON log lines for the log collector unless LOG_FORMAT says otherwise.
LOGGING["handlers"]["console"]["formatter"] = env("LOG_FORMAT", default="json")  # type: ignore[index]  # a literal dict of dicts in base
