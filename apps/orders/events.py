"""What the orders app announces inside its transactions, for the apps above it to record in the same
transaction (Django signals, sent synchronously, under the market's row lock; a receiver's exception rolls
the change back).

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
