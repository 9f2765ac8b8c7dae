import random
import time
from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from apps.demo.market_maker import MarketMaker
from apps.demo.seed import seed_demo
from apps.ledger.reconciliation import reconcile
from apps.orders.models import Command, CommandKind, CommandStatus, Market, MarketStatus, Order, Trade
from apps.orders.selectors import order_book_depth
from apps.orders.services.answers import listener_close
from apps.orders.services.commands import queue_connection_close
from apps.wallets.tests.factories import deliver_custody_callbacks


@pytest.fixture
def demo(db, settings):
    settings.CUSTODY_SIMULATOR_DELAY = 0
    seed_demo()
    deliver_custody_callbacks()
    users = get_user_model().objects.in_bulk(["marketmaker", "taker"], field_name="username")
    return users["marketmaker"], users["taker"]


def bot(demo, **kwargs) -> MarketMaker:
    maker, taker = demo
    markets = list(Market.objects.select_related("base", "quote").order_by("symbol"))
    return MarketMaker(maker_id=maker.id, taker_id=taker.id, markets=markets, rng=random.Random(7), **kwargs)


def test_a_step_quotes_a_ladder_of_bids_below_and_asks_above_on_every_market(demo):
    report = bot(demo, take_chance=0).step()

    assert report.placed == 30 and report.refused == []
    for symbol in ("BTC-USDT", "ETH-USDT", "ETH-BTC"):
        depth = order_book_depth(market=symbol)
        assert len(depth.bids) == 5 and len(depth.asks) == 5
        assert max(level[0] for level in depth.bids) < min(level[0] for level in depth.asks)


def test_the_taker_trades_against_the_ladder_and_every_invariant_holds(demo):
    market_maker = bot(demo, take_chance=1)
    for _ in range(3):
        market_maker.step()

    assert Trade.objects.exists()
    assert set(Trade.objects.values_list("maker_order__user__username", "taker_order__user__username")) == {
        ("marketmaker", "taker")
    }
    assert reconcile().ok


def test_small_moves_leave_most_of_the_ladder_in_place(demo):
    market_maker = bot(demo, take_chance=0)
    market_maker.step()
    second = market_maker.step()
    assert second.placed == second.cancelled < 30


def test_halted_markets_are_left_alone_and_shutdown_cancels_every_order(demo):
    Market.objects.filter(symbol="ETH-BTC").update(status=MarketStatus.HALTED)
    market_maker = bot(demo, take_chance=0)

    market_maker.step()

    assert not Order.objects.filter(market__symbol="ETH-BTC").exists()
    assert market_maker.cancel_all() == (20, [])
    assert order_book_depth(market="BTC-USDT").bids == []


def test_refusals_are_reported_not_raised(demo):
    maker, _ = demo
    from apps.ledger.models import Asset
    from apps.ledger.services import funds_hold

    usdt = Asset.objects.get(code="USDT")
    funds_hold(user_id=maker.id, asset=usdt, amount=Decimal("3000000"), idempotency_key="test:starve")
    report = bot(demo, take_chance=0).step()
    assert any("insufficient_funds" in refusal for refusal in report.refused)


@pytest.mark.django_db(transaction=True)  # the command manages its own connection, as in production
def test_the_command_runs_steps_and_stops(demo):
    call_command("run_market_maker", "--steps", "2", "--interval", "0", "--seed", "1", stdout=StringIO())
    assert Order.objects.filter(user__username="marketmaker").exists()
    assert not Order.objects.filter(user__username="marketmaker", status__in=["open", "partially_filled"]).exists()


def test_the_command_names_an_unknown_market(demo):
    with pytest.raises(CommandError, match="Unknown market DOGE-USDT"):
        call_command("run_market_maker", "--market", "DOGE-USDT", "--steps", "1")


@pytest.mark.django_db(transaction=True)
def test_shutdown_waits_a_bounded_time_for_a_stopped_engine_and_leaves_the_cancels_queued(demo, settings):
    """Stopping ``make run`` stops the engine with the bot: its cancels stay queued for the engine's next start,
    and the bot ends before the process manager's SIGKILL (it waited 10 s per market)."""
    market_maker = bot(demo, take_chance=0)
    market_maker.step()  # inline: quotes resting
    settings.ORDERS_ENGINE = "sequencer"  # and no engine runs

    began = time.monotonic()
    try:
        cancelled, queued = market_maker.cancel_all(wait_seconds=0.5)
    finally:
        queue_connection_close()
        listener_close()

    assert time.monotonic() - began < 2.5
    assert cancelled == 0 and queued == sorted(state.market.symbol for state in market_maker.states)
    pending = Command.objects.filter(kind=CommandKind.CANCEL_ALL, status=CommandStatus.PENDING)
    assert sorted(pending.values_list("market__symbol", flat=True)) == queued
