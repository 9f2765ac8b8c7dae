"""Production settings: clean ``check --deploy``, and no start without secrets."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from apps.ledger.signing import private_key_generate_hex
from exchange.tests.settings_defaults import development_default

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "exchange.settings.production",
    "DJANGO_SECRET_KEY": "k" * 20 + "production-grade-secret-key-with-enough-entropy-0123456789",
    "DJANGO_ALLOWED_HOSTS": "exchange.example",
    "DJANGO_ADMIN_URL": "ops-4b1d/",
    "DATABASE_URL": "postgres://exchange@db.internal:5432/exchange",
    "REDIS_URL": "redis://redis.internal:6379/0",
    "CUSTODY_WEBHOOK_SECRET": "production-webhook-secret-of-at-least-32-characters",
    "API_SECRET_ENCRYPTION_KEY": "production-encryption-key-for-api-signing-secrets",
    # a deployment's own adapter for its custody provider (settings only name it; nothing here imports it)
    "CUSTODY_ADAPTER": "custody_provider.adapter.ProviderCustody",
    "LEDGER_SIGNING_KEY": private_key_generate_hex(),
    "WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE": "BTC=0.5,USDT=10000",
    "EMAIL_URL": "smtp+tls://exchange:mail-password@smtp.example:587",
    "SITE_URL": "https://exchange.example",
}


def manage(*args: str, env: dict) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            (
                "DJANGO_",
                "DATABASE_",
                "REDIS_",
                "CUSTODY_",
                "API_",
                "LEDGER_",
                "WITHDRAWAL_",
                "EMAIL_",
                "SITE_",
                "ORDERS_",
            )
        )
    }
    clean["LOCAL_DATA_DIR"] = "/nonexistent"  # production never reads the embedded services' file
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_production_settings():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize(
    "missing",
    [
        "DJANGO_SECRET_KEY",
        "DJANGO_ALLOWED_HOSTS",
        "DJANGO_ADMIN_URL",
        "DATABASE_URL",
        "REDIS_URL",
        "CUSTODY_WEBHOOK_SECRET",
        "CUSTODY_ADAPTER",
        "API_SECRET_ENCRYPTION_KEY",
        "LEDGER_SIGNING_KEY",
        "WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE",
        "EMAIL_URL",
        "SITE_URL",
    ],
)
def test_production_refuses_to_start_without_a_secret(missing):
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != missing}
    result = manage("check", env=env)
    assert result.returncode == 1
    # One line (break-it review: a traceback of 73 lines, two of them chained).
    assert result.stderr.startswith(f"Refusing to start: Set the {missing} environment variable")
    assert result.stderr.count("\n") == 1


def _example_value(variable: str) -> str:
    """The placeholder ``.env.example`` gives ``variable``."""
    for line in (ROOT / ".env.example").read_text().splitlines():
        if line.startswith(f"{variable}="):
            return line.split("=", 1)[1]
    raise AssertionError(f"{variable} is not in .env.example")


@pytest.mark.parametrize("variable", ["DJANGO_SECRET_KEY", "CUSTODY_WEBHOOK_SECRET", "API_SECRET_ENCRYPTION_KEY"])
@pytest.mark.parametrize("source", ["env.example", "local", "test"])
def test_production_refuses_the_public_placeholder_and_development_secrets(variable, source):
    """A deployment copied from .env.example, or run with the development defaults, would sign sessions or
    accept custody callbacks with a secret anyone can read in this repository: production refuses to start."""
    value = _example_value(variable) if source == "env.example" else development_default(source, variable)
    result = manage("check", env={**PRODUCTION_ENV, variable: value})
    assert result.returncode != 0
    assert f"{variable} is a published placeholder or development value" in result.stderr


@pytest.mark.parametrize(
    "adapter",
    [
        "apps.wallets.custody.simulator.provider.SimulatedCustody",
        " apps.wallets.custody.simulator.provider.SimulatedCustody ",
        "apps.wallets.custody.simulator.provider.AnySubclass",
    ],
)
def test_production_refuses_the_simulated_custody(adapter):
    """Hole 2: unset, CUSTODY_ADAPTER ran the simulator in production, which mints coins on request and is
    also what reconcile compares the ledger with."""
    result = manage("check", env={**PRODUCTION_ENV, "CUSTODY_ADAPTER": adapter})
    assert result.returncode != 0
    assert "CUSTODY_ADAPTER names the simulated custody" in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["seed_demo"],
        ["simulate_deposit", "--user", "alice", "--asset", "BTC", "--amount", "1000"],
        ["run_custody_simulator"],
    ],
)
def test_the_simulated_custodys_commands_refuse_to_run_in_production(command):
    result = manage(*command, env=PRODUCTION_ENV)
    assert result.returncode == 1
    assert f"{command[0]} works only with the simulated custody" in result.stderr
    assert "Traceback" not in result.stderr


def test_production_refuses_a_short_api_secret_encryption_key():
    result = manage("check", env={**PRODUCTION_ENV, "API_SECRET_ENCRYPTION_KEY": "short-but-not-published"})
    assert result.returncode != 0
    assert "API_SECRET_ENCRYPTION_KEY must be at least 32 characters" in result.stderr


def test_the_soak_settings_are_the_deployed_ones_with_the_simulated_custody():
    env = {**PRODUCTION_ENV, "DJANGO_SETTINGS_MODULE": "exchange.settings.soak"}
    env.pop("CUSTODY_ADAPTER")
    code = "from django.conf import settings; print(settings.CUSTODY_ADAPTER, settings.SESSION_COOKIE_SECURE)"
    result = manage("shell", "-c", code, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].split() == [
        "apps.wallets.custody.simulator.provider.SimulatedCustody",
        "True",
    ]


@pytest.mark.parametrize("value", ["change-me-to-an-ed25519-private-key", "ab" * 31])
def test_production_refuses_a_signing_key_it_cannot_read(value):
    result = manage("check", env={**PRODUCTION_ENV, "LEDGER_SIGNING_KEY": value})
    assert result.returncode != 0
    assert "LEDGER_SIGNING_KEY is not usable: expected 64 hex characters" in result.stderr


@pytest.mark.parametrize("value", ["not-a-key", "ab" * 31, "ab" * 33])
def test_production_refuses_a_trusted_public_key_it_cannot_read(value):
    """At start-up, not at the first verification (where the keys endpoint would have answered 500)."""
    result = manage("check", env={**PRODUCTION_ENV, "LEDGER_TRUSTED_PUBLIC_KEYS": f"{'11' * 32},{value}"})
    assert result.returncode != 0
    assert "LEDGER_TRUSTED_PUBLIC_KEYS:" in result.stderr and "is not an Ed25519 public key" in result.stderr


SECURITY_SETTINGS = """
import json
from django.conf import settings
from django.http import HttpResponse
from django.middleware.csrf import CsrfViewMiddleware, get_token
from django.middleware.security import SecurityMiddleware
from django.test import Client, RequestFactory

names = ["DEBUG", "SESSION_COOKIE_SECURE", "SESSION_COOKIE_HTTPONLY", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT",
         "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD", "SECURE_PROXY_SSL_HEADER",
         "SECURE_CONTENT_TYPE_NOSNIFF", "X_FRAME_OPTIONS"]
figures = {name: getattr(settings, name) for name in names}
plain = Client().get("/no-such-page/", headers={"host": "exchange.example"})
secure = Client().get("/no-such-page/", headers={"host": "exchange.example", "x-forwarded-proto": "https"})
request = RequestFactory().get("/", secure=True, headers={"host": "exchange.example"})
response = CsrfViewMiddleware(lambda request: (get_token(request), HttpResponse())[1])(request)
probe = RequestFactory().get("/healthz", headers={"host": "exchange.example"})  # a supervisor's, over plain HTTP
figures.update(http_status=plain.status_code, http_location=plain.headers.get("Location"),
               hsts=secure.headers.get("Strict-Transport-Security"),
               csrf_cookie_secure=bool(response.cookies["csrftoken"]["secure"]),
               healthz_redirected=SecurityMiddleware(lambda request: HttpResponse()).process_request(probe) is not None)
print(json.dumps(figures))
"""


def test_production_cookies_are_secure_and_https_is_enforced_with_hsts():
    result = manage("shell", "-c", SECURITY_SETTINGS, env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])

    assert figures.pop("SECURE_HSTS_SECONDS") >= 365 * 24 * 3600
    assert figures == {
        "DEBUG": False,
        "SESSION_COOKIE_SECURE": True,
        "SESSION_COOKIE_HTTPONLY": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_HSTS_PRELOAD": True,
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
        "SECURE_CONTENT_TYPE_NOSNIFF": True,
        "X_FRAME_OPTIONS": "DENY",
        # plain HTTP is redirected to HTTPS; over HTTPS (behind the proxy) every answer carries HSTS
        "http_status": 301,
        "http_location": "https://exchange.example/no-such-page/",
        "hsts": "max-age=31536000; includeSubDomains; preload",
        "csrf_cookie_secure": True,
        "healthz_redirected": False,  # break-it review: a supervisor probing gunicorn got a 301 to the public site
    }


@pytest.mark.parametrize(
    ("redis_url", "prefix"),
    [
        ("redis://redis.internal:6379/0", "streams"),
        ("redis://redis.internal:6379", "streams"),
        ("redis://redis.internal:6379/4", "streams.db4"),
        ("rediss://user:secret@redis.internal:6380/12", "streams.db12"),
    ],
)
def test_the_stream_channels_prefix_carries_the_redis_database_number(redis_url, prefix):
    code = "from django.conf import settings; print(settings.CHANNEL_LAYERS['default']['CONFIG']['prefix'])"
    result = manage("shell", "-c", code, env={**PRODUCTION_ENV, "REDIS_URL": redis_url})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == prefix


def test_an_explicit_stream_channels_prefix_wins():
    code = "from django.conf import settings; print(settings.CHANNEL_LAYERS['default']['CONFIG']['prefix'])"
    env = {**PRODUCTION_ENV, "REDIS_URL": "redis://redis.internal:6379/4", "STREAMS_CHANNEL_PREFIX": "exchange-eu"}
    result = manage("shell", "-c", code, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "exchange-eu"


def test_production_refuses_to_start_with_no_withdrawal_confirmation_threshold():
    """Set but empty is no threshold at all: every withdrawal would go out without an e-mailed link (review)."""
    result = manage("check", env={**PRODUCTION_ENV, "WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE": ""})
    assert result.returncode != 0
    assert "to at least one asset's threshold (BTC=0.5,USDT=10000)" in result.stderr


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("DJANGO_ALLOWED_HOSTS", "*", "DJANGO_ALLOWED_HOSTS must name this exchange's own host names"),
        ("DJANGO_ALLOWED_HOSTS", "exchange.example.com", "DJANGO_ALLOWED_HOSTS must name this exchange's own host"),
        ("DJANGO_ADMIN_URL", "ops-change-me/", "DJANGO_ADMIN_URL must be a path of your own"),
        ("DJANGO_ADMIN_URL", "admin/", "DJANGO_ADMIN_URL must be a path of your own"),
        ("DJANGO_ADMIN_URL", "", "DJANGO_ADMIN_URL must be a path of your own"),
        ("DJANGO_ADMIN_URL", "/ops-4b1d/", "DJANGO_ADMIN_URL must be a path of your own"),
        ("DJANGO_ADMIN_URL", "ADMIN/", "DJANGO_ADMIN_URL must be a path of your own"),
        ("DJANGO_ADMIN_URL", " ops-4b1d/", "DJANGO_ADMIN_URL must be a path of your own"),
        ("DJANGO_ADMIN_URL", "custody/", "nor under one of the site's own paths"),
        ("DJANGO_ADMIN_URL", "api/ops/", "nor under one of the site's own paths"),
        ("DJANGO_SECRET_KEY", "x", "DJANGO_SECRET_KEY must be at least 50 characters"),
        ("DJANGO_SECRET_KEY", "a" * 60, "DJANGO_SECRET_KEY must be random"),
        ("CUSTODY_WEBHOOK_SECRET", " " * 40, "CUSTODY_WEBHOOK_SECRET must be random"),
        ("CUSTODY_WEBHOOK_SECRET", PRODUCTION_ENV["API_SECRET_ENCRYPTION_KEY"], "must be three different secrets"),
        ("LEDGER_SIGNING_KEY", "0" * 64, "LEDGER_SIGNING_KEY must be random"),
        ("EMAIL_URL", "consolemail://", "EMAIL_URL must name your SMTP server"),
        ("EMAIL_URL", "smtp+tls://user:password@smtp.example.com:587", "EMAIL_URL must name your SMTP server"),
        ("SITE_URL", "https://exchange.example.com", "SITE_URL must be this exchange's https:// address"),
        ("DJANGO_ALLOWED_HOSTS", "EXCHANGE.EXAMPLE.COM", "DJANGO_ALLOWED_HOSTS must name this exchange's own host"),
        ("DJANGO_ALLOWED_HOSTS", "exchange.example,.com", "a whole top-level domain (.com)"),
        ("SITE_URL", "http://127.0.0.1:8000", "SITE_URL must be this exchange's https:// address"),
        ("API_RATE_PER_IP", "lots", "API_RATE_PER_IP is <requests>/<second|minute|hour|day> (10/min), not 'lots'"),
        ("ORDERS_ENGINE", "Sequencer", "ORDERS_ENGINE is inline or sequencer, not 'Sequencer'"),
        (
            "CUSTODY_ADAPTER",
            "your_provider.custody.ProviderCustody",
            "CUSTODY_ADAPTER names .env.example's placeholder",
        ),
        ("CUSTODY_ADAPTER", "apps.wallets.custody.base.CustodyAdapter", "or the abstract adapter"),
        ("TRUSTED_PROXY_COUNT", "-1", "TRUSTED_PROXY_COUNT is the number of proxies in front, 0 or more, not -1"),
        ("AXES_ACCOUNT_FAILURE_LIMIT", "3", "AXES_ACCOUNT_FAILURE_LIMIT must be above AXES_FAILURE_LIMIT"),
        ("HEALTH_HEARTBEAT_SECONDS", "60", "HEALTH_HEARTBEAT_SECONDS must be above 0 and below HEALTH_HEARTBEAT_MAX"),
        ("FEE_RATE_MAX", "5", "FEE_RATE_MAX is a fraction from 0 to below 1 (0.01 is 1 %), not '5'"),
        ("FEE_RATE_MAX", "abc", "FEE_RATE_MAX is a fraction from 0 to below 1 (0.01 is 1 %), not 'abc'"),
    ],
)
def test_production_refuses_placeholders_weak_secrets_and_settings_that_fail_later(variable, value, message):
    """Break-it review: each of these started, and either switched a protection off (any host, a known signing key,
    reset links printed to the logs) or failed at the first request (every API call a 500)."""
    result = manage("check", env={**PRODUCTION_ENV, variable: value})
    assert result.returncode != 0
    assert message in result.stderr


def test_withdrawal_thresholds_are_read_by_upper_case_asset_code():
    """Break-it review: ``btc=0.5`` started and guarded no BTC withdrawal (asset codes are upper case)."""
    code = "from django.conf import settings; print(settings.WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE)"
    result = manage("shell", "-c", code, env={**PRODUCTION_ENV, "WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE": " btc=0.5"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "{'BTC': Decimal('0.5')}"


SERVER_SETTINGS = "import {module}; from django.conf import settings; print(settings.SETTINGS_MODULE, settings.DEBUG)"


def _python(code: str, env: dict) -> subprocess.CompletedProcess:
    """``python -c code`` in the repository with ``env`` and none of this process's settings module or secrets."""
    clean = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE" and k not in PRODUCTION_ENV}
    clean["LOCAL_DATA_DIR"] = "/nonexistent"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("module", ["exchange.wsgi", "exchange.asgi"])
def test_the_web_servers_entry_points_default_to_the_production_settings(module):
    """Break-it review: with DJANGO_SETTINGS_MODULE unset, gunicorn served the local settings, DEBUG on. The web
    servers' entry points now take the production ones (and refuse to start without their secrets)."""
    unset = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SETTINGS_MODULE"}

    served = _python(SERVER_SETTINGS.format(module=module), unset)
    refused = _python(SERVER_SETTINGS.format(module=module), {})

    assert served.returncode == 0, served.stderr
    assert served.stdout.strip().splitlines()[-1] == "exchange.settings.production False"
    assert refused.returncode != 0 and "Set the DJANGO_SECRET_KEY environment variable" in refused.stderr


def test_a_worker_without_a_settings_module_reads_no_settings():
    """The Celery app (which every import of the package runs) names no settings module: a worker started without
    one stops at its first read, never running the local settings (and their simulated custody)."""
    unset = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SETTINGS_MODULE"}

    result = _python("from exchange.celery import app; print(app.conf.broker_url)", unset)

    assert result.returncode != 0
    assert "You must either define the environment variable DJANGO_SETTINGS_MODULE" in result.stderr


def test_the_admin_url_refusal_knows_every_path_the_site_serves(settings):
    """:data:`SITE_PATHS` is the URLconf's first segments besides the back office (and static files): a new route
    must be added there, or a DJANGO_ADMIN_URL under it would take it over."""
    from django.urls import get_resolver

    from exchange.settings.environment import SITE_PATHS

    served = set()
    for pattern in get_resolver().url_patterns:
        text = str(pattern.pattern).lstrip("^")
        if text.startswith(settings.ADMIN_URL):
            continue
        nested = getattr(pattern, "url_patterns", None) if text == "" else None
        for inner in nested if nested is not None else [pattern]:
            served.add(str(inner.pattern).lstrip("^").split("/", 1)[0])
    assert served - {""} == SITE_PATHS - {"static"}
