"""``manage.py simulate_deposit`` (its success path runs end to end in test_worker.py, S6)."""

import pytest
from django.core.management import CommandError, call_command

from apps.ledger.tests.factories import UserFactory
from apps.wallets.custody.simulator.models import SimCallback, SimDeposit


def test_simulate_deposit_refuses_unknown_users_assets_and_bad_amounts(usdt):
    UserFactory(username="alice")
    for options, message in [
        ({"user": "nobody", "asset": "USDT", "amount": "1"}, "No user"),
        ({"user": "alice", "asset": "DOGE", "amount": "1"}, "No asset"),
        ({"user": "alice", "asset": "USDT", "amount": "0.0000001"}, "decimal"),
        ({"user": "alice", "asset": "USDT", "amount": "-1"}, "positive"),
        ({"user": "alice", "asset": "USDT", "amount": "1", "txid": "a:b"}, "txid"),
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
