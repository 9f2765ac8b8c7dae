"""The bot as a process: it outlives a terminated database connection (as the custody loop does)."""

import os
import signal
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from apps.demo.seed import seed_demo
from apps.orders.models import Command, CommandKind, CommandStatus, Order
from apps.wallets.tests.conftest import database_url, sessions_terminate, wait_for
from apps.wallets.tests.factories import deliver_custody_callbacks


def _bot(env: dict, log_path) -> subprocess.Popen:
    """``run_market_maker`` in a process group of its own, writing to ``log_path``."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "manage.py", "run_market_maker", "--interval", "0.2", "--seed", "3"],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_market_maker_survives_its_database_connection_being_terminated(tmp_path):
    settings.CUSTODY_SIMULATOR_DELAY = 0
    seed_demo()
    deliver_custody_callbacks()
    maker = get_user_model().objects.get(username="marketmaker")
    name = f"market-maker-test-{os.getpid()}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "exchange.settings.test",
        "PGAPPNAME": name,
        "DATABASE_URL": database_url(connection.settings_dict),
    }
    log_path = tmp_path / "market-maker.log"
    bot = _bot(env, log_path)
    try:
        wait_for(lambda: bot.poll() is not None or Order.objects.filter(user=maker).exists(), message="first quotes")
        sessions_terminate(name)
        placed_before = Order.objects.filter(user=maker).count()

        wait_for(
            lambda: bot.poll() is not None or Order.objects.filter(user=maker).count() > placed_before + 5,
            message="quotes after the connection was terminated",
        )
        assert bot.poll() is None, log_path.read_text()
    finally:
        if bot.poll() is None:
            os.killpg(bot.pid, signal.SIGTERM)
        bot.wait(timeout=30)
    assert "market_maker.stop" in log_path.read_text()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_market_maker_stops_at_once_when_the_engine_stopped_with_it(tmp_path):
    """``make run``'s Ctrl-C stops the engine and the bot together: the bot leaves its step (whose answer would never
    come), queues its cancels for the engine's next start and ends well before honcho's SIGKILL (5 s)."""
    settings.CUSTODY_SIMULATOR_DELAY = 0
    seed_demo()
    deliver_custody_callbacks()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "exchange.settings.test",
        "DATABASE_URL": database_url(connection.settings_dict),
        "ORDERS_ENGINE": "sequencer",  # and no engine runs: every placement waits for an answer
        "ORDERS_ENGINE_WAIT_SECONDS": "30",
    }
    log_path = tmp_path / "market-maker.log"
    bot = _bot(env, log_path)
    try:
        wait_for(lambda: bot.poll() is not None or Command.objects.exists(), message="the first queued placement")
        os.killpg(bot.pid, signal.SIGTERM)
        began = time.monotonic()
        bot.wait(timeout=30)
        stopped_in = time.monotonic() - began
    finally:
        if bot.poll() is None:
            os.killpg(bot.pid, signal.SIGKILL)
            bot.wait(timeout=30)
    text = log_path.read_text()
    assert bot.returncode == 0, text
    assert stopped_in < 5, text
    assert "market_maker.stop cancelled=0 queued_markets=" in text
    assert Command.objects.filter(kind=CommandKind.CANCEL_ALL, status=CommandStatus.PENDING).exists()
