import threading
import uuid

import pytest
from django.db import transaction

from apps.core import doorbell


@pytest.fixture
def channel():
    return f"test_doorbell_{uuid.uuid4().hex}"


@pytest.fixture
def bell(channel):
    bell = doorbell.Doorbell([channel])
    yield bell
    bell.close()


@pytest.fixture
def redis_gone(settings, tmp_path, monkeypatch):
    """The doorbell's client pointed at a Redis socket where no server listens."""
    settings.REDIS_URL = f"unix://{tmp_path}/no-redis.sock"
    monkeypatch.setattr(doorbell, "_client", None)
    yield
    doorbell._client = None  # the next test's client is built from its own settings


def _waiting(bell: doorbell.Doorbell, timeout: float) -> threading.Thread:
    waiter = threading.Thread(target=bell.wait, args=(timeout,), daemon=True)
    waiter.start()
    return waiter


def _rings_pending(bell: doorbell.Doorbell) -> bool:
    assert bell.pubsub is not None
    return bell.rang or bell.pubsub.get_message(timeout=0.2) is not None


def test_a_ring_wakes_the_reader_waiting_on_its_channel(bell, channel):
    waiter = _waiting(bell, timeout=600)

    doorbell.ring(channel)

    waiter.join(timeout=30)
    assert not waiter.is_alive()  # woken by the ring, not by its 600 s timeout


def test_rings_sent_between_waits_are_answered_by_the_next_wait_at_once(bell, channel):
    doorbell.ring(channel)
    doorbell.ring(channel)

    waiter = _waiting(bell, timeout=600)
    waiter.join(timeout=30)

    assert not waiter.is_alive()
    assert not _rings_pending(bell)  # both taken by that one wait


def test_another_channel_does_not_wake_the_reader(bell):
    doorbell.ring(f"test_doorbell_{uuid.uuid4().hex}")

    assert not _rings_pending(bell)


def test_a_channel_added_later_rings_too(bell):
    later = f"test_doorbell_{uuid.uuid4().hex}"
    bell.add(later)
    waiter = _waiting(bell, timeout=600)

    doorbell.ring(later)

    waiter.join(timeout=30)
    assert not waiter.is_alive()


@pytest.mark.django_db
def test_ring_at_commit_rings_when_the_transaction_commits_and_never_when_it_rolls_back(
    bell, channel, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        try:
            with transaction.atomic():
                doorbell.ring_at_commit(channel)
                raise RuntimeError("rolled back")
        except RuntimeError:
            pass
    assert not _rings_pending(bell)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        doorbell.ring_at_commit(channel)
        assert not _rings_pending(bell)  # not before the commit

    assert len(callbacks) == 1
    assert _rings_pending(bell)


@pytest.mark.django_db
def test_ring_at_commit_publishes_once_per_commit_and_channel_even_after_a_rolled_back_savepoint(
    channel, django_capture_on_commit_callbacks
):
    observer = doorbell._redis().pubsub()
    observer.subscribe(channel)
    try:
        assert observer.get_message(timeout=5)["type"] == "subscribe"
        with django_capture_on_commit_callbacks(execute=True):
            try:
                with transaction.atomic():
                    doorbell.ring_at_commit(channel)  # registered first, dropped with its savepoint
                    raise RuntimeError("rolled back")
            except RuntimeError:
                pass
            for _ in range(3):
                doorbell.ring_at_commit(channel)
        rings = [observer.get_message(timeout=1) for _ in range(2)]
    finally:
        observer.close()

    assert rings[0] is not None and rings[0]["channel"] == channel.encode()
    assert rings[1] is None  # one PUBLISH for the three


def test_without_redis_a_ring_is_logged_and_the_reader_polls(redis_gone, channel, caplog):
    bell = doorbell.Doorbell([channel])

    doorbell.ring(channel)  # no error reaches the writer
    waiter = _waiting(bell, timeout=600)
    waiter.join(timeout=30)

    assert not waiter.is_alive()  # back after the poll interval, not the timeout
    assert bell.pubsub is None
    assert "doorbell.ring_failed" in caplog.text
    assert "doorbell.unsubscribed" in caplog.text


def test_a_reader_whose_redis_connection_broke_hears_rings_again(bell, channel, monkeypatch):
    """A Redis restart (here: the subscription's socket closed under it) costs the reader polls, never an error."""
    monkeypatch.setattr(doorbell, "RESUBSCRIBE_SECONDS", 0)
    assert bell.pubsub is not None
    bell.pubsub.connection.disconnect()
    for _ in range(10):
        bell.wait(0.1)  # no error: reconnected by redis-py, or polling and subscribing again
    assert bell.pubsub is not None
    assert not _rings_pending(bell)

    waiter = _waiting(bell, timeout=600)
    doorbell.ring(channel)

    waiter.join(timeout=30)
    assert not waiter.is_alive()
