"""A simulated custody provider: the default custody adapter for development and tests.

It behaves like an outside provider: it keeps its own wallets, deposits and withdrawals in
its own tables (it never reads the exchange's ledger), hands out simnet addresses, and
reports deposits and withdrawal outcomes by signed HTTP callbacks to
``settings.CUSTODY_CALLBACK_URL``, from an outbox it retries until delivered. The exchange's
Celery worker runs its background work (delivering callbacks), standing in for the
provider's own machines.
"""
