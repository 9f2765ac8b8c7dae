"""What the orders app announces inside its transactions, for the apps above it to record in the same
transaction (Django signals, sent synchronously, under the market's row lock; a receiver's exception rolls
the change back).

A planned batch of the sequencer (:mod:`apps.orders.services.batching`) is written in one round trip, so it
asks its receivers for their statements instead (:data:`batch_written`).

The market data app counts fills into candles (:mod:`apps.marketdata.receivers`) and the streams app records
the book change in its outbox (:mod:`apps.streams.receivers`): the orders app imports neither.
"""

from django.dispatch import Signal

trades_executed = Signal()
"""Sent once per placement that filled, after its trades are written. Keyword arguments: ``market_id``,
``time`` (the placement's, a UTC datetime) and ``fills`` (:class:`apps.orders.engine.matching.Fill`\\ s in
matching order: ``price`` in quote per base, ``qty`` in base, ``quote_qty`` in quote, ``maker.side``)."""

book_changed = Signal()
"""Sent once per change of a market's book (placement, cancel, halt, resume), as its last write. Keyword
arguments: ``market_id``; ``update_id`` (the market's sequence as the change left it: every bump sends exactly
one, so update ids have no gaps); ``order_ids`` (the orders it wrote); ``taker_order_id`` (the placed order,
``None`` for a cancel, a halt or a resume)."""

batch_written = Signal()
"""Sent by the sequencer as it assembles the last pipeline of a planned batch (after the batch's entries are
posted; its orders, trades and resting orders are written in that same pipeline, ahead of the receivers'
statements), under the market's row lock, in the batch's transaction. Each receiver returns a list of
``(sql, parameters)`` statements that the pipeline runs (none: ``[]``).

Keyword arguments: ``market_id``; ``time`` (the batch's, a UTC datetime); ``fills`` (every fill of the batch
in matching order, as for :data:`trades_executed`); ``events``, a callable returning one
``(update_id, payload)`` pair per change of the batch (the market's sequence after the change, gapless; the
payload as the streams app records a book change: ``taker``, ``levels``, ``bid``, ``ask``, ``trades``,
``orders``, amounts as text with 18 places). It builds the payloads when called (Python time): a receiver that
records nothing need not call it.
"""
