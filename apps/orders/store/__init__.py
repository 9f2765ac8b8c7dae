"""The only SQL of the orders app, generated from the models.

Column lists come from ``Model._meta`` (:mod:`apps.orders.store.sql`), statuses from
the choices, and rows are read into named values (:class:`~apps.orders.store.markets.LockedMarket`,
:class:`~apps.orders.engine.matching.Maker`, :class:`~apps.orders.models.Order`), never by
position. Every function takes the caller's :class:`apps.ledger.db.PreparedCursor` and runs
in the caller's transaction; :mod:`apps.orders.services` decides when.
"""
