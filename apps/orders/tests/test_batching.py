"""The sequencer's planned batch (apps.orders.services.batching) against inline placement: the same commands
give the same outcomes, orders, trades, balances and stream events, and reconcile stays clean.

Each script runs twice from the same state, in a savepoint rolled back after its snapshot: once command by
command through inline placement and cancel, once as sequencer batches written by :func:`batch_write`
(called directly, so a failing planned write fails the test instead of falling back per command).
"""

import json
import re
import uuid
from decimal import Decimal

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.core.errors import DomainError
from apps.ledger.reconciliation import reconcile
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.models import Command, CommandKind, CommandStatus, Order, Trade
from apps.orders.services import batching, cancel, fee_schedule_create, fee_tier_assign, market_create, placement
from apps.orders.services.answers import CommandsAppliedElsewhere
from apps.orders.services.commands import domain_outcome
from apps.orders.services.sequencer import LockLost, Sequencer, batch_apply
from apps.orders.tests.helpers import balance
from apps.streams.models import StreamEvent
from apps.wallets.tests.conftest import database_url

D = Decimal


class _Undo(Exception):
    """Raised to roll a run's savepoint back once its snapshot is taken."""


@pytest.fixture
def traders(btc_usdt, btc, usdt):
    """Four users: two funded in both assets (the second on a fee tier of its own), one seller, one with
    almost nothing."""
    users = [UserFactory() for _ in range(4)]
    for user in users[:2]:
        fund(user, usdt, "50000")
        fund(user, btc, "2")
    fund(users[2], btc, "3")
    fund(users[3], usdt, "30")
    tier = fee_schedule_create(name="vip", maker_rate="0", taker_rate="0.0005")
    fee_tier_assign(user_id=users[1].id, schedule_id=tier.id)
    return users


def _inline(users, market, script, ids: dict) -> list:
    outcomes: list[dict] = []
    for step in script:
        try:
            if step["kind"] == "cancel_all":
                cancelled = cancel.open_orders_cancel(market_id=market.id, user_id=users[step["user"]].id)
                outcomes.append({"order_ids": [order.id for order in cancelled]})
                continue
            if step["kind"] == "cancel_client":
                order = cancel.order_cancel_by_client_id(
                    market_id=market.id,
                    user_id=users[step["user"]].id,
                    client_order_id=step["client_order_id"],
                    cancel_client_order_id=step.get("cancel_id", ""),
                    only_status=step.get("only_status", ""),
                )
            elif step["kind"] == "cancel":
                order = cancel.order_cancel(
                    order_id=ids.get(step["ref"], 0),
                    user_id=users[step["user"]].id,
                    cancel_client_order_id=step.get("cancel_id", ""),
                    only_status=step.get("only_status", ""),
                )
            else:
                order = placement.order_place(user_id=users[step["user"]].id, market=market.symbol, **step["order"])
        except DomainError as exc:
            outcomes.append(domain_outcome(exc))
        else:
            outcomes.append({"order_id": order.id})
    return outcomes


def _payload(users, market, step, ids: dict | None = None) -> dict:
    """The payload :mod:`apps.orders.services.commands` queues for a script step."""
    user = users[step["user"]]
    if step["kind"] == "cancel_all":
        return {"user_id": user.id, "by_operator": False}
    named = {"cancel_client_order_id": step["cancel_id"]} if step.get("cancel_id") else {}
    restricted = {"only_status": step["only_status"]} if step.get("only_status") else {}
    if step["kind"] == "cancel_client":
        client_order_id = step["client_order_id"]
        return {"user_id": user.id, "client_order_id": client_order_id, "by_operator": False, **named, **restricted}
    if step["kind"] == "cancel":
        order_id = (ids or {}).get(step["ref"], 0)
        return {"order_id": order_id, "user_id": user.id, "by_operator": False, **named, **restricted}
    order = {"type": "limit", "price": None, "qty": None, "quote_qty": None, "time_in_force": None}
    order |= {"post_only": False, "stp": None, "client_order_id": ""} | step["order"]
    return {"user_id": user.id, "market": market.symbol, **order}


def _batched(users, market, script, ids: dict) -> list:
    commands = [
        Command(
            market=market,
            kind=CommandKind.CANCEL if step["kind"] == "cancel_client" else CommandKind(step["kind"]),
            user=users[step["user"]],
            request_hash="-",
            token=uuid.uuid4().hex,
            payload=_payload(users, market, step, ids),
            created_at=timezone.now(),
        )
        for step in script
    ]
    Command.objects.bulk_create(commands)
    sequencer = Sequencer([market.id], batch=len(commands))
    sequencer.books_load()
    pending = sequencer.pending()
    assert len(pending) == len(script)
    with transaction.atomic():
        return batching.batch_write(sequencer.books[market.id], pending)


def _run(apply, users, market, phases, btc, usdt) -> dict:
    """Apply the script's phases with ``apply`` and snapshot what they left (ids made relative)."""
    names: dict[int, str] = {}
    ids: dict[str, int] = {}
    outcomes = []
    first_event = StreamEvent.objects.filter(kind="book").count()
    try:
        with transaction.atomic():
            for number, script in enumerate(phases):
                for index, outcome in enumerate(apply(users, market, script, ids)):
                    key = f"{number}.{index}"
                    if "order_ids" in outcome:
                        outcome = {"orders": [names[order_id] for order_id in outcome["order_ids"]]}
                    elif "order_id" in outcome:
                        names.setdefault(outcome["order_id"], key)
                        ids[key] = outcome["order_id"]
                        outcome = {"order": names[outcome["order_id"]]}
                    else:  # "No order <id>.", "Order <id> is filled: ..."
                        outcome = json.loads(
                            re.sub(r"(?<=[Oo]rder )\d+", lambda m: names.get(int(m[0]), "?"), json.dumps(outcome))
                        )
                    outcomes.append(outcome)
            snapshot = {
                "outcomes": outcomes,
                "balances": [balance(user, asset) for user in users for asset in (btc, usdt)],
                "orders": sorted(
                    (names[o.id], o.status, o.reject_reason, o.filled_qty, o.filled_quote_qty, o.fee_total)
                    + (o.held_amount, o.held_remaining)
                    for o in Order.objects.all()
                ),
                "trades": sorted(
                    (names[t.taker_order_id], t.seq, names[t.maker_order_id], t.price, t.qty, t.taker_fee, t.maker_fee)
                    for t in Trade.objects.all()
                ),
                "events": [
                    _relative(event.payload, names)
                    for event in StreamEvent.objects.filter(kind="book").order_by("id")[first_event:]
                ],
                "reconcile": reconcile().ok,
            }
            raise _Undo
    except _Undo:
        return snapshot


def _relative(payload: dict, names: dict[int, str]) -> dict:
    """A stream event with order ids as script keys and no times."""
    trades = [
        {**t, "id": f"{names[t['taker_order_id']]}-{t['id'].split('-')[1]}", "number": None, "time": None}
        | {"taker_order_id": names[t["taker_order_id"]], "maker_order_id": names[t["maker_order_id"]]}
        for t in payload["trades"]
    ]
    orders = [{**o, "id": names[o["id"]], "created_at": None, "updated_at": None} for o in payload["orders"]]
    taker = payload["taker"]
    return {**payload, "taker": None if taker is None else names[taker], "trades": trades, "orders": orders}


def _compare(traders, btc_usdt, btc, usdt, phases) -> dict:
    inline = _run(_inline, traders, btc_usdt, phases, btc, usdt)
    batched = _run(_batched, traders, btc_usdt, phases, btc, usdt)
    for part in inline:
        assert batched[part] == inline[part], part
    assert batched["reconcile"]
    return batched


def limit(user, side, price, qty, **more):
    return {"kind": "place", "user": user, "order": {"side": side, "price": price, "qty": qty, **more}}


def market_order(user, side, **more):
    return {"kind": "place", "user": user, "order": {"side": side, "type": "market", **more}}


def cancel_of(user, ref, **more):
    return {"kind": "cancel", "user": user, "ref": ref, **more}


def cancel_all(user):
    return {"kind": "cancel_all", "user": user}


def cancel_by_client_id(user, client_order_id, **more):
    return {"kind": "cancel_client", "user": user, "client_order_id": client_order_id, **more}


def test_a_batch_of_makers_takers_cancels_and_an_unfundable_order_gives_what_inline_placement_gives(
    traders, btc_usdt, btc, usdt
):
    makers = [
        limit(0, "sell", "50000", "0.1"),
        limit(2, "sell", "50010", "0.2"),
        limit(2, "sell", "50020", "0.3", client_order_id="ask-3"),
        limit(1, "buy", "49990", "0.1"),
        limit(0, "buy", "49980", "0.2"),
    ]
    mix = [
        limit(1, "buy", "50015", "0.25"),  # takes 0.1 at 50000 and 0.15 at 50010 (price improvement released)
        cancel_of(1, "0.3"),  # the bid resting since the first batch
        limit(3, "buy", "50000", "0.1"),  # cannot be held: 30 USDT available
        limit(2, "sell", "50020", "0.3", client_order_id="ask-3"),  # a replay of the first batch's order
        market_order(0, "sell", qty="0.15"),  # meets the bid at 49980 (its own: self-trade prevention)
        market_order(1, "sell", qty="0.1"),  # fills 0.1 of user 0's bid at 49980
        limit(0, "buy", "50030", "0.5", time_in_force="FOK"),  # 0.35 rests at or below: not fillable
        limit(0, "buy", "50020", "0.1", post_only=True),  # would take
        market_order(3, "buy", quote_qty="25"),  # user 3 spends 25 of its 30 USDT: 0.0004 at 50010
        limit(1, "buy", "49000", "0.00001"),  # off the step
        cancel_of(2, "0.0"),  # another user's order: not found
        cancel_of(0, "0.0"),  # filled by the first command of this batch: invalid state
        limit(1, "sell", "49000", "0.05", stp="expire_maker"),  # meets user 1's own bid? none left: fills user 0
        market_order(3, "buy", qty="0.1"),  # user 3 has 5 USDT left: insufficient funds
        limit(1, "buy", "50020", "0.05"),  # takes 0.05 at 50010 after the refusals
    ]

    # The same client id for another order, queued once the replay is applied (one placement per client id is
    # queued at a time: the command_pending_client_order_id index).
    reused = [limit(2, "sell", "50020", "0.4", client_order_id="ask-3")]

    result = _compare(traders, btc_usdt, btc, usdt, [makers, mix, reused])

    codes = [o.get("error", {}).get("type", "").rsplit(":", 1)[-1] for o in result["outcomes"][len(makers) :]]
    assert codes[2] == "InsufficientFunds"
    assert codes[3] == ""  # the replay answers with the original order
    assert result["outcomes"][len(makers) + 3] == {"order": "0.2"}
    assert codes[6:10] == ["FokNotFillable", "PostOnlyWouldTake", "", "InvalidQuantity"]
    assert codes[10:12] == ["NotFound", "InvalidState"]
    assert codes[13] == "InsufficientFunds"
    assert codes[15] == "IdempotencyConflict"
    assert codes.count("") == 8


def test_a_limit_order_worth_more_than_the_ledger_can_hold_is_refused_as_inline_placement_refuses_it(
    traders, btc_usdt, btc, usdt
):
    """Break-it review: a sell of 20 at 99999999999999999999.99 (2e21 USDT, above exchangeInfo's maxNotional) was
    accepted and rested where no buyer could ever pay it."""
    result = _compare(
        traders,
        btc_usdt,
        btc,
        usdt,
        [[limit(0, "sell", "99999999999999999999.99", "2"), limit(1, "buy", "9999999999999999999.99", "10.01")]],
    )
    codes = [o.get("error", {}).get("type", "").rsplit(":", 1)[-1] for o in result["outcomes"]]
    assert codes == ["MaxNotional", "MaxNotional"]


def test_a_cancel_of_a_users_open_orders_takes_the_orders_queued_before_it_and_none_after(traders, btc_usdt, btc, usdt):
    resting = [limit(0, "buy", "49990", "0.1"), limit(0, "sell", "50020", "0.2"), limit(1, "buy", "49980", "0.1")]
    mix = [
        limit(0, "buy", "49970", "0.3"),  # queued in the same batch, before the cancel: cancelled too
        limit(1, "sell", "49990", "0.05"),  # half fills user 0's first bid: the rest is cancelled
        cancel_all(0),
        limit(0, "buy", "49960", "0.1"),  # after it: stays open
        cancel_all(3),  # nothing open: nothing written
        cancel_of(0, "0.0"),  # cancelled by the cancel-all already
    ]

    result = _compare(traders, btc_usdt, btc, usdt, [resting, mix])

    outcomes = result["outcomes"][len(resting) :]
    assert outcomes[2] == {"orders": ["0.0", "0.1", "1.0"]}  # oldest first
    assert outcomes[4] == {"orders": []}
    assert outcomes[5]["error"]["type"].endswith("InvalidState")
    states = {row[0]: row[1] for row in result["orders"]}
    assert [states[key] for key in ("0.0", "0.1", "1.0", "1.1", "1.3", "0.2")] == ["cancelled"] * 3 + [
        "filled",
        "open",
        "open",
    ]


def test_a_cancel_by_client_order_id_finds_the_order_queued_before_it_or_stored_before_the_batch(
    traders, btc_usdt, btc, usdt
):
    resting = [limit(0, "buy", "49990", "0.1", client_order_id="old"), limit(2, "sell", "50020", "0.2")]
    mix = [
        limit(0, "buy", "49970", "0.3", client_order_id="new"),
        cancel_by_client_id(0, "new"),  # placed by the command before it, in this batch
        cancel_by_client_id(0, "old"),  # stored by the first batch
        cancel_by_client_id(0, "old"),  # cancelled already: invalid state
        cancel_by_client_id(1, "new"),  # another user's client id: not found
        cancel_by_client_id(0, "never"),
        limit(1, "buy", "50020", "0.2", client_order_id="gone"),  # fills at once
        cancel_by_client_id(1, "gone"),  # filled: invalid state
    ]

    result = _compare(traders, btc_usdt, btc, usdt, [resting, mix])

    outcomes = result["outcomes"][len(resting) :]
    assert outcomes[1:3] == [{"order": "1.0"}, {"order": "0.0"}]
    codes = [o.get("error", {}).get("type", "").rsplit(":", 1)[-1] for o in outcomes]
    assert codes[3:6] == ["InvalidState", "NotFound", "NotFound"]
    assert codes[7] == "InvalidState"
    assert {row[0]: row[1] for row in result["orders"]}["1.0"] == "cancelled"


def test_a_cancel_restricted_to_a_status_is_judged_when_applied_after_the_fills_queued_before_it(
    traders, btc_usdt, btc, usdt
):
    """Break-it review: Binance's ``cancelRestrictions=ONLY_NEW`` was checked when the request arrived, and a fill
    queued before the cancel made the order partially filled by the time the engine cancelled it anyway."""
    resting = [limit(0, "buy", "49990", "0.2"), limit(1, "buy", "49980", "0.1")]
    mix = [
        limit(2, "sell", "49990", "0.05"),  # partly fills user 0's bid, ahead of the cancels
        cancel_of(0, "0.0", only_status="open"),  # refused: partially filled by the command before it
        cancel_of(1, "0.1", only_status="partially_filled"),  # refused: nothing filled
        cancel_of(0, "0.0", only_status="partially_filled"),
        cancel_of(1, "0.1", only_status="open"),
    ]

    result = _compare(traders, btc_usdt, btc, usdt, [resting, mix])

    outcomes = result["outcomes"][len(resting) :]
    assert [o.get("error", {}).get("type", "").rsplit(":", 1)[-1] for o in outcomes[1:3]] == ["CancelRestricted"] * 2
    assert (
        outcomes[1]["error"]["message"] == "Order 0.0 is partially_filled: the cancel was restricted to another status."
    )
    assert outcomes[3:] == [{"order": "0.0"}, {"order": "0.1"}]
    states = {row[0]: (row[1], row[3]) for row in result["orders"]}
    assert states["0.0"] == ("cancelled", D("0.05")) and states["0.1"] == ("cancelled", D("0"))


def test_a_restricted_cancel_by_client_order_id_judges_the_order_queued_before_it(traders, btc_usdt, btc, usdt):
    """Break-it review: by ``origClientOrderId`` with ``cancelRestrictions``, a cancel of a placement still queued was
    answered -1007 and never queued; it now goes through the queue behind the placement, as an unrestricted one."""
    resting = [limit(1, "buy", "49980", "0.1")]
    mix = [
        limit(0, "buy", "49990", "0.2", client_order_id="grid-1"),
        limit(2, "sell", "49990", "0.05"),  # partly fills grid-1
        cancel_by_client_id(0, "grid-1", only_status="open"),  # refused: partially filled
        limit(0, "buy", "49970", "0.1", client_order_id="grid-2"),
        cancel_by_client_id(0, "grid-2", only_status="open"),  # placed in this batch, nothing filled
    ]

    result = _compare(traders, btc_usdt, btc, usdt, [resting, mix])

    outcomes = result["outcomes"][len(resting) :]
    assert outcomes[2]["error"]["type"].endswith("CancelRestricted") and outcomes[4] == {"order": "1.3"}
    states = {row[0]: row[1] for row in result["orders"]}
    assert (states["1.0"], states["1.3"]) == ("partially_filled", "cancelled")


def test_a_cancels_own_client_order_id_is_in_its_stream_event_as_inline_records_it(traders, btc_usdt, btc, usdt):
    """Break-it review: a cancel's ``newClientOrderId`` (Binance's ``c`` of the CANCELED report) never reached the
    user stream."""
    resting = [limit(0, "buy", "49990", "0.1", client_order_id="bid"), limit(1, "sell", "50020", "0.2")]
    cancels = [cancel_by_client_id(0, "bid", cancel_id="undo-bid"), cancel_of(1, "0.1", cancel_id="undo-ask")]

    result = _compare(traders, btc_usdt, btc, usdt, [resting, cancels])

    named = [event["cancel_client_order_id"] for event in result["events"]]
    assert named == ["", "", "undo-bid", "undo-ask"]


_users = st.integers(min_value=0, max_value=3)
_prices = st.sampled_from(["49990", "49995", "50000", "50005", "50010"])
_qtys = st.sampled_from(["0.05", "0.1", "0.2", "0.5", "1.5"])
_steps = st.one_of(
    st.builds(limit, _users, st.sampled_from(["buy", "sell"]), _prices, _qtys),
    st.builds(
        limit,
        _users,
        st.sampled_from(["buy", "sell"]),
        _prices,
        _qtys,
        time_in_force=st.sampled_from(["GTC", "IOC", "FOK"]),
        stp=st.sampled_from(["expire_taker", "expire_maker", "expire_both"]),
    ),
    st.builds(
        limit,
        _users,
        st.sampled_from(["buy", "sell"]),
        _prices,
        _qtys,
        post_only=st.booleans(),
        client_order_id=st.sampled_from(["", "a", "b"]),  # replays and conflicts across batches
    ),
    st.builds(market_order, _users, st.just("sell"), qty=_qtys),
    st.builds(market_order, _users, st.just("buy"), quote_qty=st.sampled_from(["100", "2500", "40000"])),
    st.builds(market_order, _users, st.just("buy"), qty=_qtys),
    st.builds(cancel_all, _users),
    st.builds(cancel_by_client_id, _users, st.sampled_from(["a", "b"])),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.lists(_steps, min_size=1, max_size=8), second=st.lists(_steps, min_size=1, max_size=12))
def test_any_two_batches_give_what_inline_placement_gives(traders, btc_usdt, btc, usdt, first, second):
    cancels = [cancel_of(0, f"0.{n}") for n in range(0, len(first), 2)]  # some of them ended already
    _compare(traders, btc_usdt, btc, usdt, [_queueable(first), _queueable(second) + cancels])


def _queueable(batch: list[dict]) -> list[dict]:
    """``batch`` less each placement whose user and client order id an earlier one of it already queued: the
    queue holds one pending placement per user and client order id (``command_pending_client_order_id``)."""
    queued, kept = set(), []
    for step in batch:
        name = step.get("order", {}).get("client_order_id", "") if step["kind"] == "place" else ""
        if name and (step["user"], name) in queued:
            continue
        queued.add((step["user"], name))
        kept.append(step)
    return kept


def _queue(users, market, script) -> None:
    commands = [
        Command(
            market=market,
            kind=CommandKind.PLACE,
            user=users[step["user"]],
            request_hash="-",
            token=uuid.uuid4().hex,
            payload=_payload(users, market, step),
            created_at=timezone.now(),
        )
        for step in script
    ]
    Command.objects.bulk_create(commands)


def test_the_sequencer_reads_the_book_again_when_another_writer_moved_the_market_sequence(traders, btc_usdt, btc, usdt):
    sequencer = Sequencer([btc_usdt.id], batch=10)
    sequencer.books_load()
    state = sequencer.books[btc_usdt.id]
    _queue(traders, btc_usdt, [limit(0, "buy", "49000", "0.1")])
    with transaction.atomic():
        batching.batch_write(state, sequencer.pending())
    written = state.sequence
    ask = placement.order_place(user_id=traders[2].id, market="BTC-USDT", side="sell", price="50000", qty="0.1")

    _queue(traders, btc_usdt, [limit(1, "buy", "50000", "0.1")])
    with transaction.atomic():
        (outcome,) = batching.batch_write(state, sequencer.pending())

    assert state.sequence == written + 2  # the inline placement's bump, then this batch's
    assert Order.objects.get(id=ask.id).status == "filled"
    assert Order.objects.get(id=outcome["order_id"]).status == "filled"
    assert reconcile().ok


@pytest.fixture
def usdt_btc(btc, usdt):
    """A second market (USDT priced in BTC): commands of another market than BTC-USDT."""
    return market_create(
        base=usdt,
        quote=btc,
        tick_size=D("0.000001"),
        step_size=D("1"),
        min_qty=D("1"),
        max_qty=D("100000"),
        min_notional=D("0.00001"),
    )


def _foreign_cancel(user, market, other) -> Order:
    """Queue on ``market`` a cancel of ``user``'s order resting on the ``other`` market, which the planner refuses
    to decide (so the batch is applied command by command); return that order."""
    foreign = placement.order_place(user_id=user.id, market=other.symbol, side="sell", price="0.00002", qty="10")
    Command.objects.create(
        market=market,
        kind=CommandKind.CANCEL,
        user=user,
        request_hash="-",
        token=uuid.uuid4().hex,
        payload={"order_id": foreign.id, "user_id": user.id, "by_operator": False},
        created_at=timezone.now(),
    )
    return foreign


def test_a_batch_the_planner_cannot_write_is_applied_per_command(traders, btc_usdt, usdt_btc):
    _queue(traders, btc_usdt, [limit(1, "buy", "49000", "0.1")])
    foreign = _foreign_cancel(traders[0], btc_usdt, usdt_btc)
    sequencer = Sequencer([btc_usdt.id], batch=10)
    sequencer.acquire()  # the fallback writes only on the connection holding the market's lock
    try:
        placed, cancelled = sequencer.apply(btc_usdt.id, sequencer.pending())
    finally:
        _release(sequencer)

    assert Order.objects.get(id=placed["order_id"]).status == "open"
    assert cancelled == {"order_id": foreign.id}  # the per-command path cancels it where it is
    assert Order.objects.get(id=foreign.id).status == "cancelled"
    assert sequencer.books[btc_usdt.id].sequence is None  # read again before the next batch
    assert set(Command.objects.values_list("status", flat=True)) == {"done"}
    assert reconcile().ok


def test_the_pending_read_takes_the_oldest_commands_across_the_markets_served_up_to_the_batch(
    traders, btc_usdt, usdt_btc
):
    other = usdt_btc
    for market in (btc_usdt, other, other, btc_usdt, other):
        _queue(traders, market, [limit(0, "buy", "49000", "0.1")])
    ids = list(Command.objects.order_by("id").values_list("id", flat=True))
    Command.objects.filter(id=ids[0]).update(status="done", outcome={"order_id": 0}, done_at=timezone.now())

    pending = Sequencer([btc_usdt.id, other.id], batch=3).pending()

    assert [(c.id, c.market_id) for c in pending] == [(ids[1], other.id), (ids[2], other.id), (ids[3], btc_usdt.id)]
    assert [c.id for c in Sequencer([btc_usdt.id], batch=3).pending()] == [ids[3]]


def _operator_cancel(market, order, operator) -> None:
    Command.objects.create(
        market=market,
        kind=CommandKind.CANCEL,
        user_id=order.user_id,
        request_hash="-",
        token=uuid.uuid4().hex,
        payload={"order_id": order.id, "user_id": None, "by_operator": True, "operator_id": operator.id, "reason": "r"},
        created_at=timezone.now(),
    )


def _operator_audits() -> list[tuple]:
    from apps.audit.models import AuditLogEntry

    rows = AuditLogEntry.objects.filter(action="order.cancel_by_operator").order_by("id")
    return [(row.object_id, row.before, row.after) for row in rows]


def test_an_operators_cancel_after_a_fill_in_the_same_batch_is_audited_as_partially_filled(traders, btc_usdt):
    """A break-it review: the audit's "before" was the status stored when the batch began (open), though a fill
    earlier in the same batch had made the order partially filled."""
    resting = placement.order_place(user_id=traders[2].id, market="BTC-USDT", side="sell", price="50000", qty="0.2")
    _queue(traders, btc_usdt, [limit(0, "buy", "50000", "0.1")])
    _operator_cancel(btc_usdt, resting, traders[3])
    sequencer = Sequencer([btc_usdt.id], batch=10)
    sequencer.books_load()

    filled, cancelled = sequencer.apply_planned(btc_usdt.id, sequencer.pending())

    assert Order.objects.get(id=filled["order_id"]).status == "filled" and cancelled == {"order_id": resting.id}
    done = Order.objects.get(id=resting.id)
    assert (done.status, done.reject_reason, done.filled_qty) == ("cancelled", "cancelled_by_operator", D("0.1"))
    assert _operator_audits() == [
        (str(resting.id), {"status": "partially_filled"}, {"status": "cancelled", "reason": "r"})
    ]
    assert reconcile().ok


def test_an_operators_cancel_applied_per_command_is_cancelled_and_audited(traders, btc_usdt, usdt_btc):
    """A break-it review: applied one command at a time (a batch the planner cannot write), an operator's cancel
    was refused with a TypeError (operator_id) and audited nowhere."""
    resting = placement.order_place(user_id=traders[2].id, market="BTC-USDT", side="sell", price="50000", qty="0.2")
    _operator_cancel(btc_usdt, resting, traders[3])
    _foreign_cancel(traders[0], btc_usdt, usdt_btc)
    sequencer = Sequencer([btc_usdt.id], batch=10)
    sequencer.acquire()  # the fallback writes only on the connection holding the market's lock
    try:
        cancelled, _ = sequencer.apply(btc_usdt.id, sequencer.pending())
    finally:
        _release(sequencer)

    assert cancelled == {"order_id": resting.id}
    assert Order.objects.get(id=resting.id).reject_reason == "cancelled_by_operator"
    assert _operator_audits() == [(str(resting.id), {"status": "open"}, {"status": "cancelled", "reason": "r"})]
    assert reconcile().ok


def _release(sequencer: Sequencer) -> None:
    """Undo :meth:`Sequencer.acquire` on the test's connection (its advisory locks outlive the test's transaction)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock_all()")
    sequencer.doorbell.close()


def test_a_batch_whose_commands_another_sequencer_applied_writes_nothing_and_raises(traders, btc_usdt):
    """Break-it review: a sequencer that had lost its lock applied the commands a standby had applied too (orders
    placed, market orders filled, two to four times). MARK_DONE marks only pending commands: a batch that finds one
    done already rolls back whole, on the planned and the per-command path, and the process ends."""
    _queue(traders, btc_usdt, [limit(0, "buy", "49000", "0.1"), limit(1, "sell", "51000", "0.1")])
    sequencer = Sequencer([btc_usdt.id], batch=10)
    sequencer.books_load()
    pending = sequencer.pending()
    batch_apply(pending[:1])  # another sequencer applied the first one
    sequencer.acquire()
    try:
        with pytest.raises(CommandsAppliedElsewhere):
            sequencer.apply_planned(btc_usdt.id, pending)
        with pytest.raises(CommandsAppliedElsewhere):
            batch_apply(pending)
    finally:
        _release(sequencer)

    assert list(Order.objects.values_list("side", flat=True)) == ["buy"]
    assert [c.id for c in sequencer.pending()] == [pending[1].id]
    assert reconcile().ok


@pytest.mark.django_db(transaction=True)
def test_a_sequencer_whose_connection_died_mid_batch_stops_instead_of_writing_on_a_new_one(
    traders, btc_usdt, monkeypatch
):
    """Break-it review: the connection holding the locks was terminated mid-batch; Django closed it when the rollback
    failed, and the per-command fallback wrote the batch on a new connection, without the lock, while a standby
    applied it too. The sequencer now stops there, the commands still pending for whoever holds the lock."""
    _queue(traders, btc_usdt, [limit(0, "buy", "49000", "0.1")])
    sequencer = Sequencer([btc_usdt.id], batch=10)
    sequencer.acquire()
    write = batching.batch_write

    def killed_first(state, commands):
        with psycopg.connect(database_url(connection.settings_dict), autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid])
        return write(state, commands)

    monkeypatch.setattr(batching, "batch_write", killed_first)
    try:
        with pytest.raises(LockLost):
            sequencer.run_once()
    finally:
        sequencer.doorbell.close()

    assert not Order.objects.exists()
    assert Command.objects.get().status == CommandStatus.PENDING
