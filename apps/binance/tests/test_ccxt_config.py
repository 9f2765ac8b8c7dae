"""The CCXT configuration of README's "Connect your bot", and the tests' clients: every base URL ccxt's binance
classes know (REST families and, for ccxt.pro, WebSocket ones) names our host, so that no call, signed or not,
carries a user's API key to Binance."""

import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import ccxt
import ccxt.pro

from apps.binance.tests.test_ccxt import binance_client
from apps.binance.tests.test_ccxt_pro import pro_client

README = Path(__file__).resolve().parents[3] / "README.md"


def _urls(value, name: str = "api") -> list[tuple[str, str]]:
    """``(family, url)`` for every URL in ccxt's ``urls["api"]``, nested dicts (``ws``, ``ws-api``) included."""
    if isinstance(value, dict):
        return [pair for key, nested in value.items() for pair in _urls(nested, f"{name}.{key}")]
    return [(name, value)]


def _hosts(exchange) -> dict[str, str]:
    return {family: urlsplit(url).netloc for family, url in _urls(exchange.urls["api"])}


def test_the_readme_configuration_sends_no_request_to_binance():
    section = README.read_text().split("## Connect your bot", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    setup = code.split("exchange.load_markets()", 1)[0]  # everything before the first request
    namespace: dict = {}
    exec(setup, namespace)  # noqa: S102  (our own README's example)

    hosts = _hosts(namespace["exchange"])

    assert {family for family, _ in _urls(ccxt.binance().urls["api"])} <= hosts.keys()
    assert {family: host for family, host in hosts.items() if host != "127.0.0.1:8000"} == {}
    assert namespace["exchange"].urls["api"]["sapi"] == "http://127.0.0.1:8000/not-served/sapi"


def test_the_readme_freqtrade_block_names_every_family_and_no_host_but_ours(capsys):
    """Break-it review: with the REST block alone, freqtrade's candles (ccxt.pro's watch_ohlcv) came from Binance."""
    section = README.read_text().split("**freqtrade**", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    exec(code, {})  # noqa: S102  (our own README's example)
    config = json.loads(capsys.readouterr().out)

    exchange = ccxt.pro.binance(config)
    hosts = _hosts(exchange)
    assert {family for family, _ in _urls(ccxt.pro.binance().urls["api"])} <= hosts.keys()
    assert {family: host for family, host in hosts.items() if host not in ("127.0.0.1:8000", "127.0.0.1:8001")} == {}
    assert (exchange.urls["api"]["public"], exchange.urls["api"]["ws"]["spot"]) == (
        "http://127.0.0.1:8000/api/v3",
        "ws://127.0.0.1:8001/ws",
    )


def test_the_test_clients_name_no_host_but_ours():
    rest = binance_client("http://127.0.0.1:8000")
    pro = pro_client("127.0.0.1:8000", "", "")

    assert {family: host for family, host in _hosts(rest).items() if host != "127.0.0.1:8000"} == {}
    assert {family: host for family, host in _hosts(pro).items() if host != "127.0.0.1:8000"} == {}
    assert {family for family, _ in _urls(ccxt.pro.binance().urls["api"])} <= _hosts(pro).keys()
