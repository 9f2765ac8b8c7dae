"""Two installs on one Redis server, kept apart by its database number, do not hear each other's stream events.

Redis pub/sub ignores the database number; the default prefix of the stream channels carries it
(``exchange.settings.environment.pubsub_prefix``). Real Redis (the suite's), real channel layers.
"""

import asyncio

from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings

from exchange.settings.environment import pubsub_prefix


def _on_database(number: int) -> str:
    """The suite's Redis URL with database ``number`` (a unix socket takes it as ``?db=``)."""
    url = settings.REDIS_URL.split("?")[0]
    if url.startswith("unix://"):
        return f"{url}?db={number}"
    return url.rsplit("/", 1)[0] + f"/{number}" if url.count("/") > 2 else f"{url}/{number}"


def _layer(number: int, run: str) -> RedisPubSubChannelLayer:
    """An install's stream layer on database ``number``, as the settings make it (``run``: this test's own names)."""
    url = _on_database(number)
    return RedisPubSubChannelLayer(hosts=[url], prefix=f"{run}-{pubsub_prefix('streams', url)}")


async def _heard(listener: RedisPubSubChannelLayer, sender: RedisPubSubChannelLayer) -> dict | None:
    """What ``listener``, in the group of user 5's stream, receives when ``sender`` sends to that group."""
    channel = await listener.new_channel()
    await listener.group_add("user_5", channel)
    try:
        await sender.group_send("user_5", {"type": "stream.event", "data": "balance of user 5"})
        try:
            return await asyncio.wait_for(listener.receive(channel), timeout=1.0)
        except TimeoutError:
            return None
    finally:
        await listener.group_discard("user_5", channel)
        await listener.flush()
        await sender.flush()


def test_an_install_on_another_database_number_does_not_hear_the_stream_events():
    import uuid

    run = uuid.uuid4().hex[:8]
    assert asyncio.run(_heard(_layer(0, run), _layer(2, run))) is None
    assert asyncio.run(_heard(_layer(0, run), _layer(0, run))) == {
        "type": "stream.event",
        "data": "balance of user 5",
    }
