"""``manage.py run_market_maker [--market SYMBOL]``: the demo's liquidity bot (see apps/demo/market_maker.py)."""

import logging
import random
import signal
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, close_old_connections, connections

from apps.demo.market_maker import MarketMaker
from apps.orders.models import Market
from apps.orders.services.commands import queue_connection_close

log = logging.getLogger("apps.demo.market_maker")

SHUTDOWN_WAIT_SECONDS = 3.0
"""How long, in all, the bot waits for the answers to its shutdown cancels."""


class _Stopped(Exception):
    """Raised by the stop signal's handler inside a step (whose commands stay queued, each applied once)."""


class Command(BaseCommand):
    help = "Keep a ladder of bids and asks on each market and sometimes take liquidity, until stopped."

    def add_arguments(self, parser):
        parser.add_argument("--market", action="append", metavar="SYMBOL", help="only this market (repeatable)")
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between steps (default 1)")
        parser.add_argument(
            "--steps", type=int, default=0, help="stop after this many steps (default: run until stopped)"
        )
        parser.add_argument("--maker", default="marketmaker", help="username quoting the ladders")
        parser.add_argument("--taker", default="taker", help="username taking liquidity")
        parser.add_argument("--seed", type=int, help="random seed, for a repeatable run")

    def handle(self, *args, **options):
        if options["interval"] < 0 or options["steps"] < 0:
            raise CommandError("--interval and --steps must not be negative.")
        users = {
            u.username: u for u in get_user_model().objects.filter(username__in=[options["maker"], options["taker"]])
        }
        missing = [name for name in (options["maker"], options["taker"]) if name not in users]
        if missing:
            raise CommandError(f"No user {', '.join(missing)}: run manage.py seed_demo first.")
        markets = Market.objects.select_related("base", "quote").order_by("symbol")
        if options["market"]:
            markets = markets.filter(symbol__in=options["market"])
            unknown = set(options["market"]) - {market.symbol for market in markets}
            if unknown:
                raise CommandError(f"Unknown market {', '.join(sorted(unknown))}.")
        bot = MarketMaker(
            maker_id=users[options["maker"]].id,
            taker_id=users[options["taker"]].id,
            markets=list(markets),
            rng=random.Random(options["seed"]),
        )

        stopping: list[bool] = []
        stepping = [False]

        def on_signal(*_) -> None:
            stopping.append(True)
            if stepping[0]:  # leave the step: its next answer may never come from an engine stopped with the bot
                raise _Stopped

        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, on_signal)
        steps = 0
        log.info("market_maker.start markets=%s", ",".join(state.market.symbol for state in bot.states))
        while not stopping and (options["steps"] == 0 or steps < options["steps"]):
            close_old_connections()  # replaces a connection the database dropped (CONN_HEALTH_CHECKS)
            steps += 1
            try:
                stepping[0] = True
                try:
                    report = bot.step()
                finally:
                    stepping[0] = False
            except _Stopped:  # its connections may be mid-statement: the cancels below open fresh ones
                connections.close_all()
                queue_connection_close()
                break
            except DatabaseError as exc:  # a dropped connection or a restart: try again next step
                log.warning("market_maker.database_error error=%s", str(exc).strip())
            else:
                log.info(
                    "market_maker.step n=%d placed=%d cancelled=%d taken=%d refused=%d",
                    steps,
                    report.placed,
                    report.cancelled,
                    report.taken,
                    len(report.refused),
                )
                for refusal in report.refused[:3]:
                    log.info("market_maker.refused %s", refusal)
            time.sleep(options["interval"])
        close_old_connections()
        try:
            # Within the few seconds a process manager waits after SIGTERM (honcho: 5) before SIGKILL: the engine is
            # often stopping at the same moment, and then applies the queued cancels when it runs again.
            cancelled, queued = bot.cancel_all(wait_seconds=SHUTDOWN_WAIT_SECONDS)
            log.info("market_maker.stop cancelled=%d queued_markets=%s", cancelled, ",".join(queued) or "-")
        except DatabaseError as exc:
            log.warning("market_maker.stop orders_left_open error=%s", str(exc).strip())
