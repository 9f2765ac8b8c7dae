"""The relay's part of ``/healthz`` (:mod:`apps.streams.health`) against the session's relay process and a held lock."""

import signal
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.ledger.tests.factories import UserFactory
from apps.streams.health import relay_health
from apps.streams.models import StreamEvent, StreamEventKind
from apps.streams.tests.processes import start_relay

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_relay_is_reported_missing_while_no_relay_process_holds_its_lock(client, stream_servers, tmp_path):
    assert relay_health() == "ok"
    stream_servers.relay.stop()  # the session's relay: started again below for the tests after this one
    try:
        assert relay_health() == "no relay"
        response = client.get("/healthz")
        assert (response.status_code, response.json()["relay"]) == (503, "no relay")
    finally:
        stream_servers.relay = start_relay(tmp_path, "relay-again")
    assert relay_health() == "ok"


def test_a_relay_that_holds_its_lock_but_publishes_nothing_is_reported_behind(stream_servers):
    """A hung relay (its session alive, the lock held, nothing published): the outbox's oldest event tells."""
    stream_servers.relay.process.send_signal(signal.SIGSTOP)  # alive, holding its lock, publishing nothing
    try:
        assert relay_health() == "ok"
        user = UserFactory()
        StreamEvent.objects.create(
            kind=StreamEventKind.NOTICE, user=user, object_id=user.id, created_at=timezone.now() - timedelta(seconds=42)
        )
        assert relay_health() == "events waiting 42 s"
    finally:
        stream_servers.relay.process.send_signal(signal.SIGCONT)  # it publishes the event and goes on
