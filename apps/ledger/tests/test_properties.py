"""Property-based: random sequences of transfers, holds and releases keep every invariant."""

import json
from decimal import Decimal
from io import StringIO

from django.core.management import call_command
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.ledger.amounts import money
from apps.ledger.errors import InsufficientFunds
from apps.ledger.reconciliation import reconcile
from apps.ledger.selectors import balances_for_user
from apps.ledger.services import funds_hold, funds_release, transfer_create
from apps.ledger.tests.factories import UserFactory, fund
from apps.ledger.tests.forgery import ok_but_for_unbacked_recipes

USERS = 4
amounts = st.decimals(min_value=Decimal("0.000001"), max_value=Decimal("80"), places=6)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("transfer"), st.integers(0, USERS - 1), st.integers(0, USERS - 1), amounts),
        st.tuples(st.just("hold"), st.integers(0, USERS - 1), st.just(None), amounts),
        st.tuples(st.just("release"), st.integers(0, USERS - 1), st.just(None), amounts),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=operations)
def test_random_ledger_operations_keep_every_invariant(db, usdt, declared_holds, operations):
    with transaction.atomic():  # a savepoint per example, rolled back at the end
        users = [UserFactory() for _ in range(USERS)]
        model = {user.id: {"available": Decimal(100), "held": Decimal(0)} for user in users}
        for user in users:
            fund(user, usdt, "100")

        for step, (kind, a, b, amount) in enumerate(operations):
            user = users[a]
            expected = model[user.id]
            try:
                if kind == "transfer" and a != b:
                    transfer_create(
                        source_user_id=user.id,
                        destination_user_id=users[b].id,
                        amount=money(amount, "USDT"),
                        transfer_id=f"p{step}",
                    )
                    expected["available"] -= amount
                    model[users[b].id]["available"] += amount
                elif kind == "hold":
                    funds_hold(user_id=user.id, asset=usdt, amount=amount, idempotency_key=f"hold:{step}")
                    expected["available"] -= amount
                    expected["held"] += amount
                elif kind == "release":
                    funds_release(user_id=user.id, asset=usdt, amount=amount, idempotency_key=f"release:{step}")
                    expected["held"] -= amount
                    expected["available"] += amount
            except InsufficientFunds:
                short = expected["available"] if kind in ("transfer", "hold") else expected["held"]
                assert short < amount  # refused only when the model agrees funds were short

            for u in users:
                usdt_balance = next(bal for bal in balances_for_user(u.id) if bal.asset == "USDT")
                assert (usdt_balance.available, usdt_balance.held) == (model[u.id]["available"], model[u.id]["held"])
            assert sum(m["available"] + m["held"] for m in model.values()) == Decimal(400)
            declared_holds.clear()
            declared_holds.update({(u.id, usdt.id): model[u.id]["held"] for u in users})
            report = reconcile()  # transfers, holds and releases: no business record backs them by design
            assert ok_but_for_unbacked_recipes(report), report.as_dict()

        out = StringIO()
        try:
            call_command("reconcile", "--json", stdout=out)
        except SystemExit:  # exit 1: the transfers, holds and releases are flagged as unbacked
            pass
        failed = [check["name"] for check in json.loads(out.getvalue())["checks"] if not check["ok"]]
        assert failed == [check.name for check in report.checks if not check.ok]  # the command agrees
        transaction.set_rollback(True)
