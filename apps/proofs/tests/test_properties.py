"""Property-based: for random balance sets, every user's proof verifies and the root sums are the ledger's
user liabilities per asset."""

from decimal import Decimal

from django.db import transaction
from django.db.models import Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.ledger.amounts import format_amount
from apps.ledger.models import USER_KINDS, Account
from apps.ledger.seal.keys import public_keys
from apps.ledger.seal.services import journal_seal
from apps.ledger.services import funds_hold
from apps.ledger.tests.factories import UserFactory, fund
from apps.proofs.selectors import liabilities_proof
from apps.proofs.services import liabilities_snapshot_take
from tools.verify_liabilities import verify

btc_amounts = st.decimals(min_value=Decimal(0), max_value=Decimal("21000000"), places=8)
usdt_amounts = st.decimals(min_value=Decimal(0), max_value=Decimal("99999999999999"), places=6)
# At least one balance, so there is an entry to seal (a snapshot is taken at a sealed block).
balance_sets = st.lists(st.tuples(btc_amounts, usdt_amounts, st.booleans()), min_size=1, max_size=9).filter(
    lambda sets: any(b or t for b, t, _ in sets)
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(balances=balance_sets)
def test_every_proof_verifies_and_the_root_sums_are_the_user_liabilities(db, usdt, btc, balances):
    with transaction.atomic():  # a savepoint per example, rolled back at the end
        users = []
        for n, (btc_amount, usdt_amount, hold_half) in enumerate(balances):
            user = UserFactory()
            users.append(user)
            if btc_amount:
                fund(user, btc, btc_amount)
            if usdt_amount:
                fund(user, usdt, usdt_amount)
                half = (usdt_amount / 2).quantize(usdt.quantum)
                if hold_half and half:
                    funds_hold(user_id=user.id, asset=usdt, amount=half, idempotency_key=f"prop:{n}:hold")
        journal_seal()
        snapshot = liabilities_snapshot_take()
        keys = {"keys": [{"key_id": k.key_id, "public_key": k.public_key} for k in public_keys()]}

        with_balance = [u for u, (b, t, _) in zip(users, balances, strict=True) if b or t]
        assert snapshot.leaf_count == len(with_balance)
        for user in with_balance:
            expected = next(
                [format_amount(b, 8), format_amount(t, 6)]
                for u, (b, t, _) in zip(users, balances, strict=True)
                if u == user
            )
            assert verify(liabilities_proof(user.id), keys) == expected
        ledger = {
            row["asset__code"]: row["total"]
            for row in Account.objects.filter(kind__in=USER_KINDS).values("asset__code").annotate(total=Sum("balance"))
        }
        assert snapshot.root_sums == [
            format_amount(ledger.get("BTC", Decimal(0)), 8),
            format_amount(ledger.get("USDT", Decimal(0)), 6),
        ]
        transaction.set_rollback(True)
