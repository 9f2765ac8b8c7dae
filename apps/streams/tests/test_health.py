"""The relay's part of ``/healthz`` (:mod:`apps.streams.health`) against a real relay process and a held lock."""

from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from apps.ledger.tests.factories import UserFactory
from apps.streams.health import relay_health
from apps.streams.models import StreamEvent, StreamEventKind
from apps.streams.relay import RELAY_LOCK_KEY
from apps.streams.tests.processes import start_relay
from apps.wallets.tests.conftest import database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_relay_is_reported_missing_until_a_relay_process_holds_its_lock(client, tmp_path):
    assert relay_health() == "no relay"
    assert client.get("/healthz").json()["relay"] == "no relay"
    relay = start_relay(tmp_path)
    try:
        assert relay_health() == "ok"
        assert client.get("/healthz").json()["relay"] == "ok"
    finally:
        relay.stop()
    assert relay_health() == "no relay"


def test_a_relay_that_holds_its_lock_but_publishes_nothing_is_reported_behind():
    """A hung relay (its session alive, the lock held, nothing published): the outbox's oldest event tells."""
    with psycopg.connect(database_url(connection.settings_dict), autocommit=True) as hung:
        hung.execute("SELECT pg_advisory_lock(%s)", [RELAY_LOCK_KEY])
        assert relay_health() == "ok"
        user = UserFactory()
        StreamEvent.objects.create(
            kind=StreamEventKind.NOTICE, user=user, object_id=user.id, created_at=timezone.now() - timedelta(seconds=42)
        )
        assert relay_health() == "events waiting 42 s"
