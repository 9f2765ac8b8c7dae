"""The lock that orders an operator's withdrawal block against the withdrawal steps that honour it.

A block or unblock (:func:`apps.accounts.restrictions.account_withdrawals_block`) takes it exclusively; a
withdrawal's request, confirmation, approval and hand-over to custody take it shared before they read the flag
(:func:`apps.accounts.selectors.withdrawals_blocked` with ``until_commit=True``). So a block waits for the steps
already under way to commit, and every step after it sees it: no withdrawal passes a block committed before it.
A PostgreSQL transaction-level advisory lock, keyed by the user: it needs no row (an account never restricted has
none) and is released when the transaction ends, so it is taken inside one.
"""

from django.db import connection


def withdrawals_lock(*, user_id: int, shared: bool) -> None:
    """Take the user's withdrawal-block lock until the end of the current transaction (shared, or exclusive)."""
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(hashtextextended(%s, 0))", [f"withdrawals-block:{user_id}"])
