"""``manage.py simulate_deposit`` (its success path runs end to end in test_worker.py, S6) and the custody loop."""

import os
import signal
import subprocess
import sys
from decimal import Decimal

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from apps.ledger.tests.factories import UserFactory
from apps.wallets.custody.simulator.models import SimCallback, SimDeposit
from apps.wallets.custody.simulator.provider import SimulatedCustody
from apps.wallets.services import deposit_address_get_or_create

from .conftest import backend_pids, database_url, sessions_terminate, wait_for


def test_simulate_deposit_refuses_unknown_users_assets_and_bad_amounts(usdt):
    UserFactory(username="alice")
    for options, message in [
        ({"user": "nobody", "asset": "USDT", "amount": "1"}, "No user"),
        ({"user": "alice", "asset": "DOGE", "amount": "1"}, "No asset"),
        ({"user": "alice", "asset": "USDT", "amount": "0.0000001"}, "decimal"),
        ({"user": "alice", "asset": "USDT", "amount": "-1"}, "positive"),
        ({"user": "alice", "asset": "USDT", "amount": "1", "txid": "a:b"}, "txid"),
        # a break-it review: it took the transaction id an internal transfer needed (see test_webhook.py)
        ({"user": "alice", "asset": "USDT", "amount": "1", "txid": "internal-23"}, "reserved for transfers"),
        ({"user": "alice", "asset": "USDT", "amount": "1", "vout": -1}, "--vout must be from 0 to 2147483647"),
        # a break-it review: beyond the column's integer, a DataError traceback
        ({"user": "alice", "asset": "USDT", "amount": "1", "vout": 2**31}, "--vout must be from 0 to 2147483647"),
    ]:
        with pytest.raises(CommandError, match=message):
            call_command("simulate_deposit", **options)


def test_simulate_deposit_fails_when_the_webhook_cannot_be_reached_and_keeps_the_callback(usdt, settings):
    UserFactory(username="bob")
    settings.CUSTODY_CALLBACK_URL = "http://127.0.0.1:9/custody/callbacks/"  # discard port: nothing listens

    with pytest.raises(CommandError, match="not delivered"):
        call_command("simulate_deposit", user="bob", asset="USDT", amount="5", txid="unreachable")

    assert SimDeposit.objects.get().txid == "unreachable"
    first = SimCallback.objects.order_by("id").first()
    assert (first.delivered_at, first.attempts) == (None, 1)  # the provider will retry it


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_custody_loop_survives_its_database_connection_being_terminated(live_server, usdt, tmp_path):
    """Found by the soak: ``pg_terminate_backend`` on the loop's connection ended ``run_custody_simulator`` (and,
    under honcho, all of ``make run``). It must reconnect and go on delivering callbacks."""
    user = UserFactory()
    address = deposit_address_get_or_create(user_id=user.id, asset=usdt).address
    name = f"custody-loop-test-{os.getpid()}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "exchange.settings.test",
        "DATABASE_URL": database_url(connection.settings_dict),
        "PGAPPNAME": name,  # libpq's application_name
        "CUSTODY_WEBHOOK_SECRET": settings.CUSTODY_WEBHOOK_SECRET,
        "CUSTODY_CALLBACK_URL": f"{live_server.url}/custody/callbacks/",
    }
    log_path = tmp_path / "custody-loop.log"
    with open(log_path, "wb") as log:
        loop = subprocess.Popen(
            [sys.executable, "manage.py", "run_custody_simulator", "--interval", "0.1"],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(
            lambda: loop.poll() is not None or backend_pids("application_name = %s", [name]),
            message="the loop's database connection",
        )
        sessions_terminate(name)

        received = SimulatedCustody().deposit_receive(address=address, amount=Decimal("5"), delay=0)

        def delivered() -> bool:
            return not SimCallback.objects.filter(deposit=received, delivered_at__isnull=True).exists()

        wait_for(lambda: loop.poll() is not None or delivered(), message="the callbacks to be delivered")
        assert loop.poll() is None, log_path.read_text()
        assert delivered()
    finally:
        if loop.poll() is None:
            os.killpg(loop.pid, signal.SIGTERM)
        loop.wait(timeout=30)


def test_simulate_deposit_without_a_database_says_so_without_a_traceback(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "exchange.settings.test",
        "DATABASE_URL": f"postgresql://postgres@/exchange?host={tmp_path}",
    }  # no server listens there
    result = subprocess.run(
        [sys.executable, "manage.py", "simulate_deposit", "--user", "alice", "--asset", "BTC", "--amount", "1"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "Cannot reach the database" in result.stderr and "is `make run` running?" in result.stderr
    assert "Traceback" not in result.stderr
