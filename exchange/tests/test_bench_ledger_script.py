"""The pgbench script of ``bench/ledger.py``'s ``transfer_function`` figure, run by pgbench on the test database.

pgbench sends a prepared statement's variables untyped, so a comparison of two of them in SQL compares text
('9' >= '10'); the script picks the destination in pgbench's own integer arithmetic instead. Users 9 and 10
are where text and integer order disagree.
"""

from decimal import Decimal

from django.db import connection
from django.db.models import Count

from apps.ledger.models import JournalEntry
from apps.ledger.reconciliation import reconcile
from apps.ledger.services import user_account
from apps.ledger.tests.factories import AssetFactory, UserFactory, fund
from apps.ledger.tests.forgery import ok_but_for_unbacked_recipes
from apps.wallets.tests.conftest import database_url
from bench import ledger as ledger_bench

TRANSFERS_PER_CLIENT = 10
TRANSFERS = TRANSFERS_PER_CLIENT * ledger_bench.PROCESSES  # none from user 10: a chance of 2^-TRANSFERS


def test_every_transfer_of_the_script_moves_funds_between_two_different_users(transactional_db):
    tether = AssetFactory(code="USDT", name="Tether", decimals=6)
    users = [UserFactory(id=9), UserFactory(id=10)]
    for user in users:
        fund(user, tether, "1000")

    ledger_bench.run_transfer_function(
        database_url(connection.settings_dict), [user.id for user in users], length=("-t", str(TRANSFERS_PER_CLIENT))
    )

    transfers = JournalEntry.objects.filter(reason="transfer").annotate(
        accounts=Count("postings__account", distinct=True)
    )
    assert sorted(transfers.values_list("accounts", flat=True)) == [2] * TRANSFERS
    assert sum(user_account(user.id, tether).balance for user in users) == Decimal(2000)
    assert ok_but_for_unbacked_recipes(reconcile())  # transfers: no business record by design
