"""`make test` on a machine with only Python: the browser tests skip and say why; under CI they are required."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROWSER_TESTS = "apps/web/tests/test_browser.py"


def run_browser_tests(**env: str) -> subprocess.CompletedProcess:
    """Run the browser tests in a child pytest against a database of its own (never this session's)."""
    database_url = os.environ["DATABASE_URL"]
    path, _, query = database_url.partition("?")
    child_env = {key: value for key, value in os.environ.items() if key != "REQUIRE_BROWSER_TESTS"}
    child_env |= {
        "CHROMIUM_PATH": "/nonexistent/chromium",
        "DATABASE_URL": f"{path.rsplit('/', 1)[0]}/fresh_machine{'?' + query if query else ''}",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", BROWSER_TESTS, "-q", "-rs", "-p", "no:cacheprovider", "--create-db"],
        cwd=ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_without_chromium_the_browser_tests_are_skipped_with_the_way_to_enable_them():
    result = run_browser_tests()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "skipped" in result.stdout and "passed" not in result.stdout
    assert "apt-get install chromium" in result.stdout


@pytest.mark.slow
def test_under_ci_a_missing_chromium_fails_the_browser_tests():
    result = run_browser_tests(REQUIRE_BROWSER_TESTS="1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "skipped" not in result.stdout
    assert "/nonexistent/chromium" in result.stdout


def test_manage_py_with_no_database_says_what_to_run(tmp_path):
    env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "DJANGO_SETTINGS_MODULE"}}
    env["LOCAL_DATA_DIR"] = str(tmp_path)  # no embedded services were ever started here
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert f"no embedded services were started under {tmp_path}" in result.stderr
    assert "Run `make run` or `make migrate` first, with the same LOCAL_DATA_DIR" in result.stderr
