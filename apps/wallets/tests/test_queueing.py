"""The task queue's sends at commit (:func:`apps.wallets.queueing.task_send_on_commit`, through
:func:`apps.core.commit.on_commit_robust`): one that fails is logged, and what the transaction wrote stands."""

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction

from apps.ledger.tests.factories import UserFactory
from apps.wallets.queueing import WITHDRAWAL_SUBMIT_TASK, task_send_on_commit

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_task_that_cannot_be_sent_after_the_commit_is_logged_and_raises_nothing(caplog):
    with transaction.atomic():
        user = UserFactory()
        task_send_on_commit(WITHDRAWAL_SUBMIT_TASK, object())  # the broker's JSON cannot carry it: sending fails

    assert get_user_model().objects.filter(pk=user.pk).exists()
    failed = [r for r in caplog.records if r.levelname == "ERROR" and "on_commit" in r.getMessage()]
    assert len(failed) == 1 and "task_send" in failed[0].getMessage()
