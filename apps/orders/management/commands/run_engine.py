"""``manage.py run_engine``: the sequencer of one or more markets (:mod:`apps.orders.services.sequencer`)."""

import signal
import sys

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from apps.orders.models import Market
from apps.orders.services.answers import CommandsAppliedElsewhere
from apps.orders.services.sequencer import LockLost, Sequencer


class Command(BaseCommand):
    help = (
        "Apply the placements and cancels of the given markets (all with --all), a batch per transaction. "
        "A second process for the same market waits as a standby and takes over when the first one dies."
    )

    def add_arguments(self, parser):
        parser.add_argument("--market", action="append", default=[], help="A market symbol (repeatable).")
        parser.add_argument(
            "--all",
            action="store_true",
            help="Every market: those that exist when it starts, and those created while it runs "
            "(looked for every few seconds; a market another sequencer serves is left to it).",
        )
        parser.add_argument("--batch", type=int, default=None, help="Commands per transaction at most.")

    def handle(self, *args, market: list[str], all: bool, batch: int | None, **options):  # noqa: A002
        if all == bool(market):
            raise CommandError("Give --market SYMBOL (repeatable) or --all.")
        markets = Market.objects.all() if all else Market.objects.filter(symbol__in=market)
        ids = dict(markets.values_list("symbol", "id"))
        missing = sorted(set(market) - ids.keys())
        if missing:
            raise CommandError(f"No such market: {', '.join(missing)}.")
        sequencer = Sequencer(list(ids.values()), batch=batch, every_market=all)
        signal.signal(signal.SIGTERM, lambda *_: sequencer.stop())

        def ready() -> None:
            served = sorted(symbol for symbol, market_id in ids.items() if market_id in sequencer.market_ids)
            left = sorted(ids.keys() - set(served))
            waiting = f" (served by another sequencer, taken once free: {', '.join(left)})" if left else ""
            self.stdout.write(f"engine ready: {', '.join(served) or '(no market yet)'}{waiting}")
            sys.stdout.flush()

        try:
            sequencer.run(on_ready=ready)
        except KeyboardInterrupt:
            pass
        except (LockLost, CommandsAppliedElsewhere) as exc:  # a second writer: stop, without a traceback
            raise CommandError(str(exc)) from None
        except DatabaseError as exc:  # the connection lost between batches, say: restarted, it waits for its locks
            raise CommandError(f"Database error, stopping: {exc}".strip()) from None
