"""What the accounts app announces inside its transactions, for the apps above it to record in the same
transaction (Django signals, sent synchronously; a receiver's exception rolls the change back).

The streams app's outbox receives them (:mod:`apps.streams.receivers`): the accounts app imports no app above it.
"""

from django.dispatch import Signal

api_key_created = Signal()
"""Sent when a user creates an API key, in its transaction. Keyword arguments: ``user_id``, ``name`` (the key's),
``scopes`` (a list of scope names)."""

password_changed = Signal()
"""Sent when a user's password is changed or reset, in its transaction. Keyword arguments: ``user_id``, ``reset``
(True for a reset by an e-mailed link)."""

second_factor_changed = Signal()
"""Sent when a user's confirmed authenticators change (one confirmed, created confirmed, re-keyed or deleted), by any
path (:mod:`apps.accounts.authenticators`), in its transaction. Keyword arguments: ``user_id``."""
