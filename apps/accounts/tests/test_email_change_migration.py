"""Migration accounts 0008: open requests to replace an address, made before approval existed, are retired."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE, AFTER = ("accounts", "0007_withdrawal_hold"), ("accounts", "0008_email_change_approval")


def _migrate(target: tuple[str, str]):
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return MigrationExecutor(connection).loader.project_state([target]).apps


def _migrate_to_latest() -> None:
    """Back to every app's latest migration: the migrations after ``AFTER`` too (accounts 0009 and on), or the tests
    after this one would miss their tables."""
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_a_change_asked_for_before_approval_existed_no_longer_confirms():
    old = _migrate(BEFORE)
    try:
        User, EmailRequest = old.get_model("auth", "User"), old.get_model("accounts", "EmailRequest")
        moving = User.objects.create(username="moving", email="owner@example.com")
        first = User.objects.create(username="first", email="")
        now = timezone.now()
        change = EmailRequest.objects.create(
            user=moving, email="thief@example.com", link_sent=True, message_sent=True, created_at=now
        )
        setting = EmailRequest.objects.create(
            user=first, email="first@example.com", link_sent=True, message_sent=True, created_at=now
        )

        EmailRequest = _migrate(AFTER).get_model("accounts", "EmailRequest")

        assert EmailRequest.objects.get(pk=change.pk).superseded_at is not None  # its link says "replaced" now
        assert EmailRequest.objects.get(pk=setting.pk).superseded_at is None  # a first address needs no approval
    finally:
        _migrate_to_latest()


def test_every_table_is_back_after_the_migration_test():
    """Review: the test above left accounts at 0008, and every later test of a second factor met no
    accounts_secondfactorepoch table."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('accounts_secondfactorepoch') IS NOT NULL")
        assert cursor.fetchone()[0]
