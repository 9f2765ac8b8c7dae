"""What the wallets app announces inside its transactions, for the apps above it to record in the same
transaction (Django signals, sent synchronously; a receiver's exception rolls the change back).

The streams app's outbox receives them (:mod:`apps.streams.receivers`): the wallets app imports no app above it.
"""

from django.dispatch import Signal

transfer_changed = Signal()
"""Sent when a deposit or a withdrawal is created or changes, before the transaction that changes it commits.

Keyword arguments: ``kind`` (``"deposit"`` or ``"withdrawal"``), ``user_id`` (its owner), ``object_id`` (its id).
"""
