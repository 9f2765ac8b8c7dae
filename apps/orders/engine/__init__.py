"""The orders app's pure core: matching and settlement planning, with no database.

Nothing in this package imports ``django.db`` (or the models): it works on plain values
(:class:`~apps.orders.engine.matching.Maker`, :class:`~apps.orders.engine.matching.Taker`,
``Decimal`` amounts, the string values of :mod:`apps.orders.engine.vocabulary`) so it is
tested without a database (``apps/orders/tests/test_engine.py``, ``test_book.py``). Besides matching
and settlement it holds the sequencer's in-memory book (:mod:`~apps.orders.engine.book`) and its
batch planner (:mod:`~apps.orders.engine.batch`). The SQL lives in
:mod:`apps.orders.store`, the orchestration (locks, transactions, posting through the
ledger) in :mod:`apps.orders.services`.
"""
