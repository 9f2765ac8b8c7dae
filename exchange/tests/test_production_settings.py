"""Production settings: clean ``check --deploy``, and no start without secrets."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "exchange.settings.production",
    "DJANGO_SECRET_KEY": "k" * 20 + "production-grade-secret-key-with-enough-entropy-0123456789",
    "DJANGO_ALLOWED_HOSTS": "exchange.example",
    "DJANGO_ADMIN_URL": "ops-4b1d/",
    "DATABASE_URL": "postgres://exchange@db.internal:5432/exchange",
    "REDIS_URL": "redis://redis.internal:6379/0",
    "CUSTODY_WEBHOOK_SECRET": "production-webhook-secret-of-at-least-32-characters",
}


def manage(*args: str, env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_", "CUSTODY_"))}
    clean["LOCAL_DATA_DIR"] = "/nonexistent"  # production never reads the embedded services' file
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_is_clean_with_production_settings():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize(
    "missing", ["DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS", "DJANGO_ADMIN_URL", "DATABASE_URL", "REDIS_URL",
                "CUSTODY_WEBHOOK_SECRET"],
)
def test_production_refuses_to_start_without_a_secret(missing):
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != missing}
    result = manage("check", env=env)
    assert result.returncode != 0
    assert f"Set the {missing} environment variable" in result.stderr
