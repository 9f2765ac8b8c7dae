"""``manage.py run_stream_relay``: publish the streams' outbox (see :mod:`apps.streams.relay`)."""

import signal

from django.core.management.base import BaseCommand

from apps.streams.relay import Relay


class Command(BaseCommand):
    help = "Publish committed stream events in order (one active relay; others wait as standbys)."

    def handle(self, *args, **options):
        relay = Relay()
        signal.signal(signal.SIGTERM, lambda *_: relay.stop())
        try:
            relay.run()
        except KeyboardInterrupt:
            pass
