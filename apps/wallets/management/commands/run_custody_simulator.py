"""``manage.py run_custody_simulator``: the simulated custody's confirmation loop.

Every interval it delivers the callbacks that are due (deposit confirmations, withdrawal
outcomes) to ``CUSTODY_CALLBACK_URL``, signed, as the provider would. Undelivered ones
are retried on later rounds. Celery beat runs the same delivery every few seconds; this
loop makes confirmations prompt on a developer machine. A database error (a restart, a
dropped connection) costs one round, not the loop: the next round reconnects.
"""

import logging
import signal
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, close_old_connections

from apps.wallets.custody.simulator.required import simulated_custody_required

log = logging.getLogger("apps.wallets.custody.simulator")


class Command(BaseCommand):
    help = "Deliver the simulated custody's due callbacks to the webhook, every interval, until stopped."

    def add_arguments(self, parser):
        parser.add_argument("--interval", type=float, default=0.5, help="seconds between rounds (default 0.5)")

    def handle(self, *args, **options):
        custody = simulated_custody_required("run_custody_simulator")
        if options["interval"] <= 0:
            raise CommandError("--interval must be positive.")
        stopping = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stopping.append(True))
        log.info("custody_simulator.start interval=%s", options["interval"])
        while not stopping:
            close_old_connections()  # replaces a connection the database dropped (CONN_HEALTH_CHECKS)
            try:
                deliveries = custody.callbacks_deliver_due()
            except DatabaseError as exc:  # what was claimed stays leased and is delivered on a later round
                log.warning("custody_simulator.database_error error=%s", str(exc).strip())
                deliveries = []
            for delivery in deliveries:
                log.info(
                    "custody_simulator.callback event=%s status=%s delivered=%s",
                    delivery.event_id,
                    delivery.status,
                    delivery.delivered,
                )
            time.sleep(options["interval"])
        log.info("custody_simulator.stop")
