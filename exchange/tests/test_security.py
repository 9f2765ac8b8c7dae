"""Security hardening (issue 8): CSRF on every form, no secrets in the repository.

Production settings (secure cookies, HSTS, refusing to start without real secrets) are in
``test_production_settings.py``; the admin's staff and second-factor gates in
``apps/backoffice/tests``; the webhook's in ``apps/wallets/tests/test_webhook.py``; API keys,
scopes and lock-outs in ``apps/api`` and ``apps/accounts``.
"""

import re
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.authentication import SessionAuthentication
from rest_framework.views import APIView

from apps.accounts.services import api_key_create
from apps.binance.endpoint import unsupported
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.services import market_create, order_place
from apps.wallets.custody.simnet import new_address
from apps.wallets.services import withdrawal_request
from apps.wallets.tests.factories import book_address
from exchange.tests.settings_defaults import development_default

from .crawl import CSRF_FIELD, crawl, is_csrf_failure

ROOT = Path(__file__).resolve().parents[2]


# CSRF ---------------------------------------------------------------------------------------------


def url_views(patterns=None, prefix: str = ""):
    """``(route, view)`` of every URL pattern, included ones too."""
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            yield from url_views(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry.callback


def test_csrf_is_checked_on_every_view_but_the_webhook_and_the_token_api():
    """The middleware is on, and the only views exempt from it are the custody webhook (signed instead), DRF
    views, which check CSRF themselves for session log-ins (``SessionAuthentication``, asserted below), and the
    Binance-compatible ``/api/v3/``, which no cookie authenticates (``X-MBX-APIKEY`` and a signature;
    apps/binance/tests/test_trading.py checks that a logged-in session gets nothing there), and ``/not-served/``,
    which answers every request "not supported" and reads nothing of it (a bot's POST there must get that answer,
    not a CSRF page)."""
    assert "django.middleware.csrf.CsrfViewMiddleware" in settings.MIDDLEWARE
    exempt = {}
    for route, view in url_views():
        if getattr(view, "csrf_exempt", False):
            exempt[route] = view
    assert "custody/callbacks/" in exempt
    for route, view in exempt.items():
        if route == "custody/callbacks/" or route.startswith("api/v3/"):
            continue
        if route == "^not-served/":
            assert view is unsupported, route
            continue
        cls = getattr(view, "cls", None)
        assert cls is not None and issubclass(cls, APIView), f"{route} skips CSRF"
        for authentication in cls().get_authenticators():
            if isinstance(authentication, SessionAuthentication):  # DRF's, which enforces CSRF
                assert type(authentication).enforce_csrf is SessionAuthentication.enforce_csrf, route


@pytest.fixture
def trader(usdt, btc):
    """A trader with something behind every form: an API key, a resting order, a withdrawal awaiting approval."""
    trader = UserFactory()
    api_key_create(user_id=trader.id, name="laptop", scopes=["read"])
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_daily_limit=Decimal(10_000))
    fund(trader, usdt, "1000")
    market_create(
        base=btc,
        quote=usdt,
        tick_size=Decimal("0.01"),
        step_size=Decimal("0.0001"),
        min_qty=Decimal("0.0001"),
        max_qty=Decimal("100"),
        min_notional=Decimal("5"),
    )
    order_place(user_id=trader.id, market="BTC-USDT", side="buy", price=Decimal("100"), qty=Decimal("1"))
    address = book_address(trader, usdt, new_address()).address
    withdrawal_request(user_id=trader.id, asset_code="USDT", amount="50", address=address)
    return trader


def test_every_form_of_the_trader_ui_needs_the_csrf_token(trader):
    """Crawl the trader UI (logged out, then logged in) and POST every form without its token: 403, CSRF."""
    browser = Client(enforce_csrf_checks=True)
    forms = crawl(browser, ["/accounts/login/", "/signup/"], inside="/", skip=("/admin/", "/api/")).forms
    browser.force_login(trader)
    forms.update(
        crawl(
            browser,
            ["/", "/wallet/", "/markets/", "/activity/", "/api-keys/"],
            inside="/",
            skip=("/admin/", "/api/", "/accounts/logout/"),
        ).forms
    )

    assert {
        "/accounts/login/",
        "/signup/",
        "/accounts/logout/",
        "/api-keys/",
        "/api-keys/<n>/revoke/",
        "/wallet/deposit-address/",
        "/wallet/withdraw/",
        "/wallet/withdrawals/<n>/cancel/",
        "/markets/BTC-USDT/orders/",
        "/orders/<n>/cancel/",
    } <= forms.keys(), sorted(forms)
    for kind, form in forms.items():
        assert form.has_csrf_token, f"the form posting to {kind} on {form.page} has no CSRF token"
        fields = {name: value for name, value in form.fields.items() if name != CSRF_FIELD}
        response = browser.post(form.action, fields)
        assert is_csrf_failure(response), f"{kind} accepted a POST without its CSRF token ({response.status_code})"
    # With its token the same browser gets through (so the 403s above are the missing token's doing).
    page = browser.get("/api-keys/")
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.content).group(1).decode()
    created = browser.post("/api-keys/", {"name": "desk", "scopes": ["read"], CSRF_FIELD: token})
    assert created.status_code in (200, 302) and not is_csrf_failure(created)


def test_the_api_refuses_a_browser_session_post_without_the_csrf_token(trader):
    """The API trusts the browser's session cookie only with the CSRF token; an API key is no ambient credential."""
    order = {"market": "BTC-USDT", "side": "buy", "type": "limit", "price": "100", "qty": "0.1"}
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(trader)

    refused = browser.post("/api/v1/orders/", order, content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]["message"]
    browser.get("/wallet/")  # sets the CSRF cookie, as the page would
    placed = browser.post(
        "/api/v1/orders/",
        order,
        content_type="application/json",
        headers={"X-CSRFToken": browser.cookies["csrftoken"].value},
    )
    assert placed.status_code == 201, placed.content
    key = api_key_create(user_id=trader.id, name="bot", scopes=["read", "trade"])[1]
    with_key = Client(enforce_csrf_checks=True).post(
        "/api/v1/orders/", order, content_type="application/json", headers={"Authorization": f"Token {key}"}
    )
    assert with_key.status_code == 201, with_key.content


# Secrets ------------------------------------------------------------------------------------------

BEGIN, END = "-----BEGIN ", "-----END "
SECRET_PATTERNS = {
    "private key": re.compile(re.escape(BEGIN) + r"(?:[A-Z0-9]+ )*PRIVATE KEY-----"),
    "AWS access key": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"),
    "Slack token": re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    "Stripe live key": re.compile(r"\b[rs]k_live_[0-9A-Za-z]{16,}\b"),
    "Google API key": re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"),
}
SECRET_FILE_NAMES = re.compile(r"(^|/)(\.env|id_rsa|id_ed25519|id_ecdsa|.*\.(pem|key|p12|pfx|jks|keystore))$")
ENV_SECRETS = ("DJANGO_SECRET_KEY", "CUSTODY_WEBHOOK_SECRET")


def tracked_files(root: Path) -> list[Path]:
    """The files git tracks under ``root`` (everything but caches and local data when it is no checkout)."""
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
        return [root / name for name in names.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", ".local", "__pycache__", "staticfiles", ".pytest_cache", ".hypothesis"}
        return [path for path in root.rglob("*") if path.is_file() and not skip & set(path.parts)]


def secrets_in(root: Path, files: list[Path]) -> list[str]:
    """What looks like a committed credential: secret-bearing file names, key and token formats, and real
    values for the secrets in example environment files."""
    findings = []
    for path in files:
        name = path.relative_to(root).as_posix()
        if SECRET_FILE_NAMES.search(name):
            findings.append(f"{name}: a file that holds secrets")
        try:
            text = path.read_text(errors="ignore")
        except OSError:
            continue
        for kind, regex in SECRET_PATTERNS.items():
            if regex.search(text):
                findings.append(f"{name}: {kind}")
        if re.search(r"(^|/)\.env\.", name):
            for variable in ENV_SECRETS:
                value = re.search(rf"^{variable}=(.*)$", text, re.MULTILINE)
                if value and value.group(1).strip() and not value.group(1).strip().startswith("change-me"):
                    findings.append(f"{name}: {variable} has a value (use a change-me placeholder)")
    return findings


def test_the_secret_scan_finds_planted_credentials(tmp_path):
    """The scan itself works: each kind of credential planted in a scratch tree is found."""
    planted = {
        "deploy/server.pem": "",
        ".env": "DJANGO_SECRET_KEY=x\n",
        "notes.txt": BEGIN + "OPENSSH PRIVATE KEY-----\nabc\n" + END + "OPENSSH PRIVATE KEY-----\n",
        "config.py": "AWS = '" + "AKIA" + "ABCDEFGHIJKLMNOP'\nTOKEN = '" + "ghp_" + "a" * 36 + "'\n",
        ".env.production": "CUSTODY_WEBHOOK_SECRET=" + "s3cr3t" * 8 + "\n",
    }
    for name, text in planted.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    findings = secrets_in(tmp_path, sorted(tmp_path.rglob("*")))

    assert sorted(findings) == sorted(
        [
            "deploy/server.pem: a file that holds secrets",
            ".env: a file that holds secrets",
            "notes.txt: private key",
            "config.py: AWS access key",
            "config.py: GitHub token",
            ".env.production: CUSTODY_WEBHOOK_SECRET has a value (use a change-me placeholder)",
        ]
    )


def test_no_credentials_are_committed():
    files = tracked_files(ROOT)
    assert len(files) > 100  # the scan saw the repository
    assert secrets_in(ROOT, files) == []


@pytest.mark.parametrize("module, marker", [("local", "dev-only"), ("test", "test-only")])
def test_the_only_secrets_in_the_code_are_development_values_production_refuses(module, marker):
    """Local and test settings default the secrets to values named for what they are; production refuses them
    (``test_production_settings.py``)."""
    for variable in ENV_SECRETS:
        value = development_default(module, variable)
        assert value.startswith(marker), (variable, value)
