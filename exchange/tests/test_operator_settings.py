"""The operators' settings: production asks every staff user for a second factor; fee rates are capped."""

from exchange.tests.test_production_settings import PRODUCTION_ENV, manage

SHOW = "from django.conf import settings; print(settings.STAFF_SECOND_FACTOR_REQUIRED, settings.FEE_RATE_MAX)"


def test_production_requires_every_operators_second_factor_and_caps_fees_at_1_percent():
    result = manage("shell", "-c", SHOW, env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].split() == ["True", "0.01"]


def test_the_settings_are_read_from_the_environment():
    env = {**PRODUCTION_ENV, "STAFF_SECOND_FACTOR_REQUIRED": "false", "FEE_RATE_MAX": "0.005"}
    result = manage("shell", "-c", SHOW, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].split() == ["False", "0.005"]
