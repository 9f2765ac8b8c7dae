"""What the ledger app announces inside its transactions, for the apps above it to record in the same transaction
(Django signals, sent synchronously; a receiver's exception rolls the change back).

The back office's audit log receives them (:mod:`apps.backoffice.asset_audit`): the ledger imports no app above it.
"""

from django.dispatch import Signal

asset_saved = Signal()
"""Sent when an operator creates an asset or changes its settings in the admin, in the save's transaction. Keyword
arguments: ``actor_id`` (the operator), ``asset_id``, ``created`` (True for a new asset), ``before`` and ``after``
(:func:`apps.ledger.admin.asset_state`: ``{}`` before a creation) and ``reason`` (checked, stripped)."""
