"""Settings shared by every environment; values come from the environment (django-environ).

See ``.env.example`` for the variables and README.md for their meaning.
"""

from datetime import timedelta
from pathlib import Path
from typing import Any

import environ
from celery.schedules import crontab
from csp.constants import NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured

from .environment import (
    SIMULATED_CUSTODY_ADAPTER,
    amounts_by_asset,
    celery_broker_from_redis_url,
    database_from_url,
    fraction,
    pubsub_prefix,
    throttle_rate,
)

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()


SECRET_KEY = env("DJANGO_SECRET_KEY")
DEBUG = False
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=[])
ADMIN_URL = env("DJANGO_ADMIN_URL", default="admin/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "axes",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "pgtrigger",
    "djmoney",
    "apps.ledger",
    "apps.audit",
    "apps.orders",
    "apps.wallets",
    "apps.accounts",
    "apps.api",
    "apps.web",
    "apps.marketdata",
    "apps.binance",
    "apps.backoffice",
    "apps.proofs",
    "apps.wallets.custody.simulator",
    "apps.demo",
    "apps.streams",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "apps.core.content_length.ContentLengthMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "apps.backoffice.parameters.AdminParametersMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "apps.accounts.session_idle.SessionIdleMiddleware",  # before OTPMiddleware
    "apps.accounts.session_second_factor.SessionSecondFactorMiddleware",  # before OTPMiddleware
    "django_otp.middleware.OTPMiddleware",
    "apps.backoffice.second_factor.SecondFactorMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "apps.web.htmx_login.HtmxLoginRedirectMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "apps.web.not_found.NotFoundMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns lock-outs into responses
]

# Content-Security-Policy on every response (django-csp): scripts only from our own files (the trader UI's
# htmx, the admin's, Swagger UI's through SpectacularSwaggerSplitView), never inline or from elsewhere; no
# framing, no plugins, forms post only to us. Inline style attributes stay allowed: the admin's templates and
# Swagger UI use them, and a style cannot run code.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

ROOT_URLCONF = "exchange.urls"
WSGI_APPLICATION = "exchange.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database_from_url(env("DATABASE_URL"))}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# The hot paths (posting an entry, matching) prepare their statements once per connection;
# turn this off behind a transaction-mode connection pooler (PgBouncer).
DATABASE_PREPARED_STATEMENTS = env.bool("DATABASE_PREPARED_STATEMENTS", default=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# How many proxies in front of the app append to X-Forwarded-For (API.md; README "Production"): 0 means the
# socket's peer is the client. exchange.client_ip decides the client's address for throttles, lockouts and keys.
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)
if TRUSTED_PROXY_COUNT < 0:
    raise ImproperlyConfigured(
        f"TRUSTED_PROXY_COUNT is the number of proxies in front, 0 or more, not {TRUSTED_PROXY_COUNT}."
    )

REDIS_URL = env("REDIS_URL")
# Timeouts: a stalled Redis is an error within seconds (GET /healthz says so), never a request hanging for ever.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }
}

# Log-in brute-force protection (django-axes): locked per username and IP after repeated failures.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("AXES_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# Not an axes setting: the account-level lock (apps.accounts.lockout.AccountLockoutHandler). This many failures of
# one username within the cool-off, from any addresses, lock every log-in of it (owner told by e-mail). axes has
# one limit for all its parameter sets, so this one is counted by the handler; keep it above AXES_FAILURE_LIMIT.
AXES_ACCOUNT_FAILURE_LIMIT = env.int("AXES_ACCOUNT_FAILURE_LIMIT", default=20)
if not 0 < AXES_FAILURE_LIMIT < AXES_ACCOUNT_FAILURE_LIMIT:  # else one address alone locks the owner out everywhere
    raise ImproperlyConfigured("AXES_ACCOUNT_FAILURE_LIMIT must be above AXES_FAILURE_LIMIT, and both above 0.")
AXES_HANDLER = "apps.accounts.lockout.AccountLockoutHandler"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "apps.accounts.lockout.lockout_response"
AXES_CLIENT_IP_CALLABLE = "exchange.client_ip.client_ip"
# How long an e-mailed password-reset link works (Django's default is three days).
PASSWORD_RESET_TIMEOUT = env.int("PASSWORD_RESET_SECONDS", default=3600)
OTP_TOTP_ISSUER = "Exchange back office"
# django-otp's admin never shows a device's secret or its QR code, not even to a superuser: a trader's second factor
# is theirs alone.
OTP_ADMIN_HIDE_SENSITIVE_DATA = True
# django-otp's throttle after a wrong code (apps/accounts/second_factor.py): every code is refused for
# factor * 2**(failures - 1) seconds (1, 2, 4, 8 ...: locked for longer after each), a right code resets it; 0 is off.
OTP_TOTP_THROTTLE_FACTOR = env.int("OTP_TOTP_THROTTLE_FACTOR", default=1)
OTP_STATIC_THROTTLE_FACTOR = env.int("OTP_STATIC_THROTTLE_FACTOR", default=1)

# API keys: their HMAC signing secrets (for /api/v3/) are stored encrypted with a key derived from this
# (apps/accounts/secret_box.py): required; local and test settings set a development value.
API_SECRET_ENCRYPTION_KEY = env("API_SECRET_ENCRYPTION_KEY")
# Longest lifetime of a key from POST /auth/token/ (seconds; expires_in may ask for less).
API_KEY_MAX_LIFETIME = env.int("API_KEY_MAX_LIFETIME", default=365 * 24 * 3600)
# Most active (neither revoked nor expired) API keys one account may have; Binance allows 30.
API_KEY_MAX_ACTIVE = env.int("API_KEY_MAX_ACTIVE", default=30)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
    {"NAME": "apps.accounts.passwords.MaximumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# Dates with seconds and the time zone wherever no format is given (exchange/formats/en/formats.py).
FORMAT_MODULE_PATH = ["exchange.formats"]
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "web:wallet"  # "/" is the markets, for everyone
# A browser session ends this long after its log-in (Django's default is two weeks). Not moved on by each request:
# that would write the session on every page (SESSION_SAVE_EVERY_REQUEST), even after a failed statement.
SESSION_COOKIE_AGE = env.int("SESSION_SECONDS", default=12 * 3600)
# Not a Django setting: a browser session unused this long (seconds) is logged out at its next request, within the
# absolute end above (apps/accounts/session_idle.py); 0 turns it off. Its last use is written at most once a minute,
# so a session ends between a minute less and this long after its last request.
SESSION_IDLE_SECONDS = env.int("SESSION_IDLE_SECONDS", default=30 * 60)
LOGOUT_REDIRECT_URL = "login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.api.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["apps.api.permissions.HasScope"],
    "DEFAULT_PARSER_CLASSES": ["apps.api.parsers.DecimalJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "apps.api.negotiation.FormatNegotiation",
    "DEFAULT_THROTTLE_CLASSES": ["apps.api.throttles.IpRateThrottle", "apps.api.throttles.KeyRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "ip": throttle_rate(env, "API_RATE_PER_IP", default="1200/min"),
        "key": throttle_rate(env, "API_RATE_PER_KEY", default="600/min"),
        "login": throttle_rate(env, "API_RATE_LOGIN", default="10/min"),
        "signup": throttle_rate(env, "SIGNUP_RATE_PER_IP", default="20/hour"),  # the web sign-up form's POSTs
        "password_reset": throttle_rate(env, "PASSWORD_RESET_RATE_PER_IP", default="10/hour"),  # the reset form's
    },
    "EXCEPTION_HANDLER": "apps.api.exceptions.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Exchange API",
    "DESCRIPTION": "Spot trading, balances, deposits and withdrawals. Amounts are strings of plain decimals.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",  # served from our static files: no CDN needed
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "apps.api.schema.add_error_responses",
    ],
}

# The Binance-compatible /api/v3/ (apps.binance): request weight per client IP per minute, new orders per
# account per 10 seconds and per day (Binance's own spot limits by default), counted in Redis.
BINANCE_REQUEST_WEIGHT_PER_MINUTE = env.int("BINANCE_REQUEST_WEIGHT_PER_MINUTE", default=6000)
BINANCE_ORDERS_PER_10_SECONDS = env.int("BINANCE_ORDERS_PER_10_SECONDS", default=100)
BINANCE_ORDERS_PER_DAY = env.int("BINANCE_ORDERS_PER_DAY", default=200000)

# Celery: Redis is the broker; tasks acknowledge late and are re-queued if a worker dies.
CELERY_BROKER_URL = celery_broker_from_redis_url(REDIS_URL)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Tests and benchmarks give each run its own queue so a stray worker or an old message never interferes.
CELERY_TASK_DEFAULT_QUEUE = env("CELERY_TASK_DEFAULT_QUEUE", default="celery")

# Custody (apps.wallets; API.md "Custody webhook"). The adapter talks to the custody provider;
# the default one is the simulated provider of apps/wallets/custody/simulator (production requires a real one).
CUSTODY_ADAPTER = env("CUSTODY_ADAPTER", default=SIMULATED_CUSTODY_ADAPTER)
# Shared secret of the webhook's HMAC-SHA256 signature: required (local and test settings set a development value).
CUSTODY_WEBHOOK_SECRET = env("CUSTODY_WEBHOOK_SECRET")
# A callback whose timestamp is further than this from our clock (seconds) is refused as stale.
CUSTODY_WEBHOOK_MAX_SKEW = env.int("CUSTODY_WEBHOOK_MAX_SKEW", default=300)
# Largest callback body accepted (bytes).
CUSTODY_WEBHOOK_MAX_BODY = env.int("CUSTODY_WEBHOOK_MAX_BODY", default=65536)
# Where the simulated provider sends its callbacks.
CUSTODY_CALLBACK_URL = env(
    "CUSTODY_CALLBACK_URL", default=f"http://127.0.0.1:{env('WEB_PORT', default='8000')}/custody/callbacks/"
)
# The simulated provider: confirmations it reports for a deposit (callbacks 0..N, the last one
# "confirmed"), seconds between two of them (and before a withdrawal's outcome), the share of
# withdrawals that fail on chain, the network fee it charges per withdrawal ({asset code: amount}),
# and its HTTP timeout when it calls the webhook (seconds).
CUSTODY_SIMULATOR_CONFIRMATIONS = env.int("CUSTODY_SIMULATOR_CONFIRMATIONS", default=3)
CUSTODY_SIMULATOR_DELAY = env.float("CUSTODY_SIMULATOR_DELAY", default=1.0)
CUSTODY_SIMULATOR_FAILURE_RATE = env.float("CUSTODY_SIMULATOR_FAILURE_RATE", default=0.0)
CUSTODY_SIMULATOR_NETWORK_FEES = env.dict("CUSTODY_SIMULATOR_NETWORK_FEES", default={})
CUSTODY_SIMULATOR_HTTP_TIMEOUT = env.float("CUSTODY_SIMULATOR_HTTP_TIMEOUT", default=10.0)

# Wallets: a validator per network for withdrawal addresses ({network: dotted path}).
WALLETS_ADDRESS_VALIDATORS = {"simnet": "apps.wallets.custody.simnet.validate_address"}
# The sweep re-queues approved withdrawals still not submitted this many seconds after they were
# approved; it runs every interval.
WALLETS_SWEEP_AFTER = env.int("WALLETS_SWEEP_AFTER", default=120)
WALLETS_SWEEP_INTERVAL = env.float("WALLETS_SWEEP_INTERVAL", default=30.0)
# The custody inbox: a worker applies up to this many stored callbacks per transaction; events still
# unprocessed (and not being processed) this many seconds after they were stored wake a worker, checked
# every interval (seconds), so a killed worker's events wait a few seconds, not minutes.
WALLETS_INBOX_BATCH = env.int("WALLETS_INBOX_BATCH", default=200)
WALLETS_INBOX_SWEEP_AFTER = env.float("WALLETS_INBOX_SWEEP_AFTER", default=5.0)
WALLETS_INBOX_SWEEP_INTERVAL = env.float("WALLETS_INBOX_SWEEP_INTERVAL", default=5.0)

# Sealed journal and proof of liabilities (PROOFS.md): the Ed25519 private key that signs blocks and
# snapshots, as 64 hex characters or PEM. Local and test settings supply one; production requires it.
LEDGER_SIGNING_KEY = env("LEDGER_SIGNING_KEY", default="")
# Public keys (64 hex characters each, comma-separated) that journal_verify and reconcile accept besides
# LEDGER_SIGNING_KEY's own: the retired signing keys after a rotation. Keys in the database are not trusted
# (anyone with write access could add one): a block or snapshot signed by a key in neither fails verification.
LEDGER_TRUSTED_PUBLIC_KEYS = env.list("LEDGER_TRUSTED_PUBLIC_KEYS", default=[])
# The sealer seals at most this many entries per block, every LEDGER_SEAL_INTERVAL seconds (beat).
LEDGER_SEAL_BATCH = env.int("LEDGER_SEAL_BATCH", default=5000)
LEDGER_SEAL_INTERVAL = env.float("LEDGER_SEAL_INTERVAL", default=5.0)
# Reconciliation (invariant 9) reports entries still unsealed this many seconds after they were posted.
LEDGER_SEAL_GRACE = env.int("LEDGER_SEAL_GRACE", default=60)
# The sealer records each block's height and hash in Redis and refuses to seal on a chain that lost that block
# (apps/ledger/seal/witness.py); off, nothing is recorded or checked.
LEDGER_SEAL_HEAD_WITNESS = env.bool("LEDGER_SEAL_HEAD_WITNESS", default=True)

# GET /healthz's worker check: beat sends a heartbeat task this often, and a worker must have run one within the
# max age (exchange/health.py). An unrun heartbeat expires rather than piling up while no worker takes them.
HEALTH_HEARTBEAT_SECONDS = env.float("HEALTH_HEARTBEAT_SECONDS", default=5.0)
HEALTH_HEARTBEAT_MAX_AGE = env.float("HEALTH_HEARTBEAT_MAX_AGE", default=30.0)
if not 0 < HEALTH_HEARTBEAT_SECONDS < HEALTH_HEARTBEAT_MAX_AGE:  # else /healthz reports a working worker down
    raise ImproperlyConfigured("HEALTH_HEARTBEAT_SECONDS must be above 0 and below HEALTH_HEARTBEAT_MAX_AGE.")

CELERY_BEAT_SCHEDULE: dict = {
    "health-heartbeat": {
        "task": "exchange.heartbeat",
        "schedule": HEALTH_HEARTBEAT_SECONDS,
        "options": {"expires": HEALTH_HEARTBEAT_SECONDS},
    },
    "reconcile-hourly": {"task": "apps.backoffice.tasks.reconcile_scheduled", "schedule": crontab(minute=0)},
    "wallets-requeue-custody-events": {
        "task": "apps.wallets.tasks.custody_events_sweep",
        "schedule": WALLETS_INBOX_SWEEP_INTERVAL,
    },
    "wallets-requeue-approved-withdrawals": {
        "task": "apps.wallets.tasks.withdrawals_sweep",
        "schedule": WALLETS_SWEEP_INTERVAL,
    },
    "ledger-journal-seal": {
        "task": "apps.ledger.tasks.journal_seal_scheduled",
        "schedule": LEDGER_SEAL_INTERVAL,
    },
    "proofs-liabilities-snapshot-daily": {
        "task": "apps.proofs.tasks.liabilities_snapshot_scheduled",
        "schedule": crontab(minute=5, hour=0),
    },
}

# Ledger: hot system accounts (fee revenue) are split into this many shards, summed for reporting.
LEDGER_FEE_REVENUE_SHARDS = env.int("LEDGER_FEE_REVENUE_SHARDS", default=8)

# The matching engine (apps.orders.services.commands, docs/DESIGN.md section 7): "inline" runs a
# placement or cancel in the caller's process and transaction (tests, tiny installs); "sequencer"
# hands it to the market's sequencer process (manage.py run_engine) and waits for its outcome.
ORDERS_ENGINE = env("ORDERS_ENGINE", default="inline")
if ORDERS_ENGINE not in ("inline", "sequencer"):  # "Sequencer" queued for a sequencer /healthz did not watch
    raise ImproperlyConfigured(f"ORDERS_ENGINE is inline or sequencer, not {ORDERS_ENGINE!r}.")
# How long a caller waits for the sequencer's answer before order_status_unknown (HTTP 504).
ORDERS_ENGINE_WAIT_SECONDS = env.float("ORDERS_ENGINE_WAIT_SECONDS", default=10.0)
# A sequencer is rung when a command is queued (apps.core.doorbell); without a ring (lost with Redis) it reads
# its queue after this many idle seconds anyway.
ORDERS_ENGINE_IDLE_SECONDS = env.float("ORDERS_ENGINE_IDLE_SECONDS", default=1.0)
# Commands a sequencer applies per transaction at most.
ORDERS_ENGINE_BATCH = env.int("ORDERS_ENGINE_BATCH", default=200)
# A sequencer plans each batch in memory and writes it set-based (apps.orders.services.batching); off:
# every command runs inline placement's code in a savepoint of the batch (the fallback path).
ORDERS_ENGINE_PLANNED = env.bool("ORDERS_ENGINE_PLANNED", default=True)
# Deadlocks and serialization failures are retried this many times in all.
LEDGER_TRANSACTION_ATTEMPTS = env.int("LEDGER_TRANSACTION_ATTEMPTS", default=8)

# Logs: one line per event, "key=value" text for people (default) or JSON lines for collectors
# (LOG_FORMAT=json); the Celery worker uses the same configuration.
LOG_FORMAT = env("LOG_FORMAT", default="text")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {
            "()": "apps.core.log_text.TextFormatter",
            "format": "%(asctime)s level=%(levelname)s logger=%(name)s process=%(process)d %(message)s",
        },
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
    "loggers": {"axes": {"level": "WARNING"}},
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# Back office: the highest maker or taker fee rate an operator may propose (a fraction: 0.01 is 1 %).
FEE_RATE_MAX = fraction(env, "FEE_RATE_MAX", default="0.01")
# Whether every staff user (not only approvers) must confirm a second factor (TOTP) in the admin.
# Off for local runs and tests; production turns it on.
STAFF_SECOND_FACTOR_REQUIRED = env.bool("STAFF_SECOND_FACTOR_REQUIRED", default=False)
# E-mail (notifications and confirmation links) through Django's e-mail framework: EMAIL_URL is
# django-environ's email_url (smtp://user:password@host:port, smtp+tls://..., consolemail://).
# Unset: the console backend prints every message. SITE_URL starts the links in those messages.
EMAIL_CONFIG = env.email_url("EMAIL_URL", default="consolemail://")
vars().update({name: value for name, value in EMAIL_CONFIG.items() if value is not None})
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", default="Exchange <no-reply@exchange.localhost>")
SITE_URL = env("SITE_URL", default=f"http://127.0.0.1:{env('WEB_PORT', default='8000')}").rstrip("/")
# A trader's e-mail address is set only by the link sent to it (sign-up, the security page), valid this long.
EMAIL_CONFIRMATION_MAX_AGE = env.int("EMAIL_CONFIRMATION_MAX_AGE", default=172800)
# At most this many such requests per user in 24 hours (more are refused), and messages to one address (more are
# not sent): nobody uses the exchange to flood an address.
EMAIL_REQUESTS_PER_DAY = env.int("EMAIL_REQUESTS_PER_DAY", default=5)

# Withdrawal address book: a new address is usable this long after its e-mail confirmation; the
# confirmation link is valid for WITHDRAWAL_ADDRESS_CONFIRMATION_MAX_AGE seconds.
WITHDRAWAL_ADDRESS_COOLING_OFF_SECONDS = env.int("WITHDRAWAL_ADDRESS_COOLING_OFF_SECONDS", default=86400)
WITHDRAWAL_ADDRESS_CONFIRMATION_MAX_AGE = env.int("WITHDRAWAL_ADDRESS_CONFIRMATION_MAX_AGE", default=86400)
# Withdrawals are paused this long after a password change or reset, a second factor replaced or removed, or an
# e-mail address replaced (apps.accounts.holds; Binance pauses them 24 h); 0 turns the pause off.
WITHDRAWAL_SECURITY_HOLD_SECONDS = env.int("WITHDRAWAL_SECURITY_HOLD_SECONDS", default=86400)
# A withdrawal of more than this amount ({asset code: amount}, e.g. BTC=0.5,USDT=10000) waits for a
# confirmation by e-mail link before it is held for approval; it expires (hold released) when not
# confirmed within WITHDRAWAL_CONFIRMATION_MAX_AGE seconds. Assets not listed need none.
WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE = amounts_by_asset(
    env.dict("WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE", default={}), name="WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE"
)
WITHDRAWAL_CONFIRMATION_MAX_AGE = env.int("WITHDRAWAL_CONFIRMATION_MAX_AGE", default=3600)
CELERY_BEAT_SCHEDULE["wallets-expire-unconfirmed-withdrawals"] = {
    "task": "apps.wallets.tasks.withdrawals_expire_sweep",
    "schedule": WALLETS_SWEEP_INTERVAL,
}
# Streams (apps.streams): WebSockets served by the ASGI app (exchange/asgi.py, uvicorn) through Django
# Channels; events cross processes on Redis pub/sub. Book, trade and user events are written to an
# outbox in the transaction of their change and published in order by one relay (run_stream_relay).
# The channels' prefix carries REDIS_URL's database number (pubsub_prefix: pub/sub ignores it).
CHANNEL_LAYERS: dict[str, dict[str, Any]] = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {
            "hosts": [REDIS_URL],
            "prefix": env("STREAMS_CHANNEL_PREFIX", default=pubsub_prefix("streams", REDIS_URL)),
        },
    }
}
# Record stream events (off only to measure what they cost: with it off there are no streams).
STREAMS_PUBLISH = env.bool("STREAMS_PUBLISH", default=True)
# Seconds a user stream key lives (extended by PUT /api/v1/stream-token/, like Binance's listenKey).
STREAMS_TOKEN_TTL = env.int("STREAMS_TOKEN_TTL", default=3600)
# Seconds between checks that an open user stream's key still exists: a revoked key closes its streams
# within this time (an expired one at its expiry).
STREAMS_TOKEN_CHECK_SECONDS = env.float("STREAMS_TOKEN_CHECK_SECONDS", default=10.0)
# WebSocket connections one client address may hold open on one streams process (the address as
# TRUSTED_PROXY_COUNT decides it: behind a proxy, set that, or every client shares the proxy's);
# Binance allows 300 new connections per 5 minutes per address.
STREAMS_CONNECTIONS_PER_ADDRESS = env.int("STREAMS_CONNECTIONS_PER_ADDRESS", default=300)
# Messages a WebSocket client may send per second on one connection (bursts of twice that); past it the
# connection is closed (Binance: 5).
STREAMS_MESSAGES_PER_SECOND = env.int("STREAMS_MESSAGES_PER_SECOND", default=5)
# Where browsers open the streams: empty means the page's own host (a proxy routes /ws/ and /stream
# to the ASGI server); make run serves them on their own port.
STREAMS_URL = env("STREAMS_URL", default="")
# Outbox rows the relay publishes per transaction, and how long it waits for a notification.
STREAMS_RELAY_BATCH = env.int("STREAMS_RELAY_BATCH", default=500)
STREAMS_RELAY_IDLE_SECONDS = env.float("STREAMS_RELAY_IDLE_SECONDS", default=1.0)
